#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the local node stack's binaries from the Go module proxy and installs the Debian
# packages it needs. Binaries are cached outside the clone, keyed by version, so a warm
# run only checks that they exist.
#   build.sh [stack]  what the cluster runs: containerd, runc, crictl, the Kubernetes
#                     components, an OCI registry (stack.sh up); with NR1_RUNTIME=crio,
#                     CRI-O and conmon too
#   build.sh release  what make release uses: helm, crane
#   build.sh tools    what the tests, make release and the README's install commands use
#                     beside it: helm, crane, Prometheus, the Prometheus Operator (make
#                     e2e, deploy/ci/readme-commands.sh)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
. "$here/versions.env"
cache=${NR1_CACHE:-$HOME/.cache/nr1-agent}
bin=$cache/bin
mkdir -p "$bin"
export GOFLAGS=-mod=mod

log() { printf '[build] %s\n' "$*" >&2; }

# go_install NAME VERSION PKG... installs PKG@VERSION into $bin/NAME-VERSION/.
go_install() {
  local name=$1 version=$2; shift 2
  local dir=$bin/$name-$version
  [ -f "$dir/.done" ] && return 0
  log "go install $name $version"
  mkdir -p "$dir"
  for pkg in "$@"; do GOBIN=$dir go install "$pkg@$version"; done
  touch "$dir/.done"
}

build_runc() {
  local dir=$bin/runc-$RUNC_VERSION
  [ -f "$dir/.done" ] && return 0
  log "go install runc $RUNC_VERSION (seccomp)"
  mkdir -p "$dir"
  CGO_ENABLED=1 GOBIN=$dir go install -tags seccomp "github.com/opencontainers/runc@$RUNC_VERSION"
  touch "$dir/.done"
}

# build_kube compiles the Kubernetes components from k8s.io/kubernetes through a wrapper
# module: the main module cannot require k8s.io/kubernetes without a replace per staging
# module, and those must stay out of the project's go.mod.
build_kube() {
  local dir=$bin/kube-$KUBE_VERSION
  [ -f "$dir/.done" ] && return 0
  local mod=$cache/src/kube-wrapper-$KUBE_VERSION
  mkdir -p "$dir" "$mod"
  log "building Kubernetes $KUBE_VERSION components (cold: about 10 minutes)"
  local gomod
  gomod=$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')
  {
    echo "module nr1local/kube"
    echo
    echo "go 1.26.0"
    echo
    echo "require k8s.io/kubernetes $KUBE_VERSION"
    echo
    echo "replace ("
    sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#\1#p' "$gomod" |
      grep -vE 'sample-(cli-plugin|controller)$' |
      while read -r m; do echo "	$m => $m $KUBE_STAGING_VERSION"; done
    echo ")"
  } >"$mod/go.mod"
  cat >"$mod/tools.go" <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
GO
  local minor=${KUBE_VERSION#v1.}; minor=${minor%%.*}
  local ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
  (
    cd "$mod"
    go mod tidy >/dev/null 2>&1 || go mod tidy
    for c in kubelet kube-apiserver kube-controller-manager kube-scheduler kubectl; do
      log "go build $c"
      CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$dir/$c" "k8s.io/kubernetes/cmd/$c"
    done
  )
  touch "$dir/.done"
}

# build_crio compiles CRI-O from its module's source (go install refuses it: the proxy
# lists no versions of the module), with pinns, its C helper, and copyimg, its test tool
# that writes an image archive into containers/storage: no registry can be reached.
# The tags leave out what needs libraries the machine lacks (gpgme, btrfs,
# devicemapper, ostree); seccomp is kept.
build_crio() {
  local dir=$bin/crio-$CRIO_VERSION
  [ -f "$dir/.done" ] && return 0
  "$here/apt-install.sh" conmon gcc libc6-dev libseccomp-dev
  log "building CRI-O $CRIO_VERSION (cold: about 5 minutes)"
  local src=$cache/src/cri-o-$CRIO_VERSION moddir
  moddir=$(go mod download -json "github.com/cri-o/cri-o@$CRIO_VERSION" | sed -n 's/.*"Dir": "\(.*\)",/\1/p')
  rm -rf "$src" && mkdir -p "$src" "$dir"
  cp -r "$moddir/." "$src" && chmod -R u+w "$src"
  local tags="containers_image_openpgp containers_image_ostree_stub exclude_graphdriver_btrfs exclude_graphdriver_devicemapper seccomp"
  (
    cd "$src"
    CGO_ENABLED=1 go build -trimpath -tags "$tags" -ldflags "-s -w" -o "$dir/crio" ./cmd/crio
    CGO_ENABLED=1 go build -trimpath -tags "$tags" -ldflags "-s -w" -o "$dir/crio-copyimg" ./test/copyimg
    make -s -C pinns CC=gcc >/dev/null
    cp bin/pinns "$dir/pinns"
  )
  touch "$dir/.done"
}

# module_dir prints where the Go module proxy's MODULE@VERSION was unpacked, and fails
# (the caller with it) when it could not be downloaded.
module_dir() {
  local d
  d=$(go mod download -json "$1" | sed -n 's/.*"Dir": "\(.*\)",/\1/p')
  [ -n "$d" ] && [ -d "$d" ] || { log "go mod download $1 failed"; return 1; }
  echo "$d"
}

# build_prometheus_operator builds the operator and its config reloader, static, from
# the Go module proxy: its go.mod replaces its API and client modules by the directories
# they come from, which its module archive leaves out, so they are put back first.
build_prometheus_operator() {
  local dir=$bin/prometheus-operator-$PROMETHEUS_OPERATOR_VERSION mod=github.com/prometheus-operator/prometheus-operator
  [ -f "$dir/.done" ] && return 0
  log "building the Prometheus Operator $PROMETHEUS_OPERATOR_VERSION"
  local src=$cache/src/prometheus-operator-$PROMETHEUS_OPERATOR_VERSION sub from
  rm -rf "$src" && mkdir -p "$src" "$dir"
  from=$(module_dir "$mod@$PROMETHEUS_OPERATOR_VERSION")
  cp -r "$from/." "$src"
  for sub in pkg/apis/monitoring pkg/client; do
    from=$(module_dir "$mod/$sub@$PROMETHEUS_OPERATOR_VERSION")
    mkdir -p "$src/$sub"
    cp -r "$from/." "$src/$sub"
  done
  chmod -R u+w "$src"
  (cd "$src" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$dir/" ./cmd/operator ./cmd/prometheus-config-reloader)
  touch "$dir/.done"
}

# link makes one directory on PATH for the scripts: links into the versioned directories.
link() {
  mkdir -p "$cache/path"
  for d in "$@"; do
    for f in "$bin/$d"/*; do ln -sfn "$f" "$cache/path/$(basename "$f")"; done
  done
}

stack() {
  "$here/apt-install.sh" etcd-server containernetworking-plugins libseccomp-dev iptables iproute2 conntrack openssl curl jq
  go_install containerd "$CONTAINERD_VERSION" \
    github.com/containerd/containerd/v2/cmd/containerd \
    github.com/containerd/containerd/v2/cmd/ctr \
    github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2
  build_runc
  go_install crictl "$CRICTL_VERSION" sigs.k8s.io/cri-tools/cmd/crictl
  build_kube
  go_install registry "$REGISTRY_VERSION" github.com/distribution/distribution/v3/cmd/registry
  link "containerd-$CONTAINERD_VERSION" "runc-$RUNC_VERSION" "crictl-$CRICTL_VERSION" "kube-$KUBE_VERSION" "registry-$REGISTRY_VERSION"
  if [ "${NR1_RUNTIME:-containerd}" = crio ]; then
    build_crio
    link "crio-$CRIO_VERSION"
  fi
  log "the stack's binaries ready in $cache/path"
}

tools() {
  go_install helm "$HELM_VERSION" helm.sh/helm/v3/cmd/helm
  go_install crane "$CRANE_VERSION" github.com/google/go-containerregistry/cmd/crane
  GOFLAGS="$GOFLAGS -tags=remove_all_sd,enable_kubernetes_sd" \
    go_install prometheus "$PROMETHEUS_VERSION" github.com/prometheus/prometheus/cmd/prometheus
  # The Prometheus Operator, and what it runs in the cluster, static: images of the binary
  # alone (make e2e builds them, TestStrangersPath).
  build_prometheus_operator
  GOFLAGS="$GOFLAGS -tags=remove_all_sd,enable_kubernetes_sd" CGO_ENABLED=0 \
    go_install prometheus-static "$PROMETHEUS_VERSION" github.com/prometheus/prometheus/cmd/prometheus
  link "helm-$HELM_VERSION" "crane-$CRANE_VERSION" "prometheus-$PROMETHEUS_VERSION"
  log "helm, crane, Prometheus and the Prometheus Operator ready in $cache"
}

# release is what make release uses: helm and crane.
release() {
  go_install helm "$HELM_VERSION" helm.sh/helm/v3/cmd/helm
  go_install crane "$CRANE_VERSION" github.com/google/go-containerregistry/cmd/crane
  link "helm-$HELM_VERSION" "crane-$CRANE_VERSION"
}

case ${1:-stack} in
  stack) stack ;;
  tools) tools ;;
  release) release ;;
  *) echo "usage: $0 [stack|tools|release]" >&2; exit 2 ;;
esac
