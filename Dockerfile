# syntax=docker/dockerfile:1
#
# rnnserve's container image, FROM scratch: the static serve binary (the
# bundled models are embedded in it), dresim, CA certificates and a
# non-root user, laid out by scripts/build-image.sh. docs/deploy.md says how
# to build and run it.
#
#   docker build -t rnnserve .
#   docker run --rm -p 8080:8080 -p 8081:8081 rnnserve
#   docker run --rm -p 8080:8080 -v "$PWD/my-models:/models:ro" rnnserve -model-repository /models
#
# The build stage runs scripts/build-image.sh, which CI runs too (go test
# ./deploy/): the image's binaries and tree are built exactly as CI builds
# and checks them. CI also builds the runtime stage below with podman from
# that tree (it needs no base image), unpacks the image and runs its
# entrypoint from it (deploy/container_test.go). GO_VERSION follows
# .ci/run's GO_WANT (the test checks it).

ARG GO_VERSION=1.26.8

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# serve -version and rnnserve_build_info: the build context has no .git,
# so give them (docs/deploy.md):
#   --build-arg RNNSERVE_VERSION=$(git describe --tags --always --dirty)
#   --build-arg RNNSERVE_COMMIT=$(git rev-parse HEAD)
ARG RNNSERVE_VERSION
ARG RNNSERVE_COMMIT
RUN scripts/build-image.sh /out

FROM scratch
# Binaries, CA certificates, /etc/passwd and /etc/group (root, nonroot
# 65532), dresim's sweep files under /rnnserve, and /models.
COPY --from=build /out/rootfs/ /
# dresim looks a sweep NAME up as configs/sweeps/NAME.yaml below its
# working directory.
WORKDIR /rnnserve
# nonroot, by number, so that Kubernetes can check runAsNonRoot.
USER 65532:65532
# REST (KServe v2 over HTTP) and gRPC.
EXPOSE 8080 8081
# A model repository of your own, served with -model-repository /models.
VOLUME ["/models"]
# Both listeners on every interface (the binary's defaults are loopback
# only); arguments given to docker run or a pod's args are appended.
ENTRYPOINT ["/usr/local/bin/serve", "-listen", "0.0.0.0:8080", "-grpc-listen", "0.0.0.0:8081"]
