#!/usr/bin/env bash
# Builds the control-plane binaries that envtest-based tests need (etcd,
# kube-apiserver) plus helm, from source, into bin/ at the repository root
# (or into $BIN_DIR when set). Each binary is built from its own pinned tools
# module under hack/tools/<name>/ (go.mod + go.sum are committed), so the
# build is reproducible and never touches the root go.mod.
#
# A binary that already exists and reports the expected version is left
# alone, so the script is cheap to re-run. A cold build of all three takes
# around ten minutes on two cores.
#
# Usage: hack/envtest-binaries.sh            (BIN_DIR=/some/dir to override)
set -euo pipefail

ETCD_VERSION=v3.7.3
KUBE_VERSION=v1.37.2
HELM_VERSION=v3.22.0

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="${ROOT}/hack/tools"
BIN_DIR="${BIN_DIR:-${ROOT}/bin}"
mkdir -p "${BIN_DIR}"
BIN_DIR="$(cd "${BIN_DIR}" && pwd)"

# Tool modules are standalone: never pick up a workspace or vendor mode from
# the caller, never use cgo, and keep the committed go.mod/go.sum as they are.
export GOWORK=off
export CGO_ENABLED=0
export GOFLAGS="-mod=readonly"

# helm's built-in Kubernetes capabilities follow its client-go (v0.37 -> 1.37).
kube_major="${KUBE_VERSION#v}"; kube_major="${kube_major%%.*}"
kube_minor="${KUBE_VERSION#v*.}"; kube_minor="${kube_minor%%.*}"

# version_of NAME: prints the version the installed binary reports, or nothing.
version_of() {
	local bin="${BIN_DIR}/$1"
	[[ -x "${bin}" ]] || return 0
	case "$1" in
	etcd) "${bin}" --version </dev/null 2>/dev/null | sed -n 's/^etcd Version: /v/p' || true ;;
	kube-apiserver) "${bin}" --version </dev/null 2>/dev/null | sed -n 's/^Kubernetes //p' || true ;;
	helm) "${bin}" version --template '{{.Version}}' </dev/null 2>/dev/null || true ;;
	esac
}

# build NAME WANT PKG [LDFLAGS]: builds PKG inside hack/tools/NAME unless
# bin/NAME already reports WANT.
build() {
	local name="$1" want="$2" pkg="$3" ldflags="${4:-}"
	local have
	have="$(version_of "${name}")"
	if [[ "${have}" == "${want}" ]]; then
		echo "${name} ${want}: present"
		return 0
	fi
	local start=${SECONDS}
	local tmp="${BIN_DIR}/.${name}.tmp.$$"
	trap "rm -f '${tmp}'" EXIT
	(cd "${TOOLS}/${name}" && go build -trimpath -ldflags "-s -w ${ldflags}" -o "${tmp}" "${pkg}") </dev/null
	mv -f "${tmp}" "${BIN_DIR}/${name}"
	trap - EXIT
	have="$(version_of "${name}")"
	if [[ "${have}" != "${want}" ]]; then
		echo "${name}: built binary reports '${have}', want '${want}'" >&2
		return 1
	fi
	echo "${name} ${want}: built in $((SECONDS - start))s"
}

build etcd "${ETCD_VERSION}" .

build kube-apiserver "${KUBE_VERSION}" . "\
-X k8s.io/component-base/version.gitVersion=${KUBE_VERSION} \
-X k8s.io/component-base/version.gitMajor=${kube_major} \
-X k8s.io/component-base/version.gitMinor=${kube_minor} \
-X k8s.io/component-base/version.gitTreeState=clean"

build helm "${HELM_VERSION}" helm.sh/helm/v3/cmd/helm "\
-X helm.sh/helm/v3/internal/version.version=${HELM_VERSION} \
-X helm.sh/helm/v3/internal/version.gitTreeState=clean \
-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=${kube_major} \
-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=${kube_minor} \
-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=${kube_major} \
-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=${kube_minor}"
