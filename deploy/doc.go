// Package deploy has no code: its tests check rnnserve's container image
// (the Dockerfile and scripts/build-image.sh, at the repository's root) and
// its Kubernetes and KServe manifests (deploy/kubernetes) against the
// binaries they run. docs/deploy.md is the guide to both.
//
// The tests build serve and dresim with scripts/build-image.sh, exactly as
// the image's build stage does, check that they are static, and then:
//
//   - read the Dockerfile with BuildKit's own parser and check that its
//     build stage runs that script with CI's Go version, and that its
//     entrypoint's flags, ports, user and volume are the ones the
//     manifests rely on and the binary has;
//   - decode every manifest strictly into the Kubernetes API types
//     (k8s.io/api, and the Prometheus Operator's for the ServiceMonitor):
//     a field the type lacks fails the test. KServe's own Go types are not
//     used: github.com/kserve/kserve v0.17.0 brings about 130 modules
//     (Knative, KEDA, Istio, cloud storage clients), took 8.5 minutes to
//     compile here and did not build against the controller-runtime its
//     other requirements select; the ServingRuntime and InferenceService
//     are decoded strictly into the subset of KServe's types they use,
//     with the same JSON names and corev1.Container for the containers;
//   - check what must agree across them: ports, probe paths, environment
//     variable names, image, labels and selectors, the shutdown timing;
//   - run the binaries as the manifests do: serve with the Deployment's
//     arguments and configuration, answering its probe and scrape paths
//     and stopping on SIGTERM within the drain timeout, and dresim as the
//     Indexed Job's pods and its merge step, with the Job's arguments and
//     environment.
//
// These tests import k8s.io modules; nothing in the server's or dresim's
// binaries imports this package.
package deploy
