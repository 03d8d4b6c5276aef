// Package charts holds the Helm chart of storybus (charts/storybus) and its
// tests: helm lint, rendered manifests against golden files, the values
// schema, the chart's CRDs and RBAC against those controller-gen generates,
// the image's Dockerfile, and a real helm install, upgrade and uninstall
// against a kube-apiserver started by envtest. The tests run the helm binary
// that `make tools` builds into bin/.
package charts
