# syntax=docker/dockerfile:1
#
# rnnserve's container image: the static serve binary (the bundled models
# are embedded in it) and dresim, on distroless's static base as a non-root
# user. docs/deploy.md says how to build and run it.
#
#   docker build -t rnnserve .
#   docker run --rm -p 8080:8080 -p 8081:8081 rnnserve
#   docker run --rm -p 8080:8080 -v "$PWD/my-models:/models:ro" rnnserve -repository /models
#
# The build stage runs scripts/build-image.sh, which CI runs too (go test
# ./deploy/): the image's binaries are built exactly as CI builds and checks
# them. GO_VERSION follows .ci/run's GO_WANT (the test checks it).

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

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/serve /out/dresim /usr/local/bin/
# dresim looks a sweep NAME up as configs/sweeps/NAME.yaml below its
# working directory.
COPY --from=build /src/configs/sweeps /rnnserve/configs/sweeps
WORKDIR /rnnserve
# distroless's nonroot user, by number, so that Kubernetes can check
# runAsNonRoot.
USER 65532:65532
# REST (KServe v2 over HTTP) and gRPC.
EXPOSE 8080 8081
# A model repository of your own, served with -repository /models.
VOLUME ["/models"]
# Both listeners on every interface (the binary's defaults are loopback
# only); arguments given to docker run or a pod's args are appended.
ENTRYPOINT ["/usr/local/bin/serve", "-listen", "0.0.0.0:8080", "-grpc-listen", "0.0.0.0:8081"]
