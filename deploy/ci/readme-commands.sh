#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The README's install and uninstall commands, typed as written, on the local cluster left
# up by `make run` (run by deploy/ci/quickstart.sh): kubectl nr1 installed with `go
# install …@latest` (the module served from this clone's HEAD by a file proxy in front of
# the Go module proxy) and run; the operators' RoleBinding; the kustomize uninstall, then
# `kubectl apply -k deploy/kustomize/base` and its uninstall; `helm install` into its
# namespace, the namespace's Pod Security label, `helm uninstall` and the namespace's
# deletion; make release into the stack's registry, and helm install from it. Each is
# checked for what the README says it does.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
deploy/local/build.sh tools # helm
eval "$(deploy/local/stack.sh env)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# step names the README's command run next, as the README writes it (deploy/ci's test
# checks that the README still does).
step() { echo "== readme: $*"; }
fail() { echo "readme-commands: error: $*" >&2; exit 1; }

# daemonset_scheduled: the agent's DaemonSet exists and placed its pod on the NR1 node.
daemonset_scheduled() {
  local n
  for _ in $(seq 1 60); do
    n=$(kubectl -n nr1-system get daemonset nr1-agent -o jsonpath='{.status.currentNumberScheduled}' 2>/dev/null || true)
    [ "$n" = 1 ] && return 0
    sleep 1
  done
  fail "the nr1-agent DaemonSet did not place its pod on the node: $(kubectl -n nr1-system get ds,pods 2>&1)"
}

# uninstall_kustomize: the README's uninstall for kustomize, then nothing of the agent left.
uninstall_kustomize() {
  step "kubectl -n nr1-system delete daemonset nr1-agent --cascade=foreground"
  kubectl -n nr1-system delete daemonset nr1-agent --cascade=foreground
  step "kubectl delete -k deploy/kustomize/base --ignore-not-found"
  kubectl delete -k deploy/kustomize/base --ignore-not-found
  kubectl wait --for=delete namespace/nr1-system --timeout=120s
}

mod=github.com/neureality-sdk/nr1-agent
version=v0.0.0-$(TZ=UTC git log -1 --format=%cd --date=format-local:%Y%m%d%H%M%S)-$(git rev-parse --short=12 HEAD)
proxy=$work/proxy/$mod/@v
mkdir -p "$proxy"
git archive --format=zip --prefix="$mod@$version/" -o "$proxy/$version.zip" HEAD
cp go.mod "$proxy/$version.mod"
printf '{"Version":"%s","Time":"%s"}\n' "$version" "$(git log -1 --format=%cI HEAD)" >"$proxy/$version.info"
: >"$proxy/list"
cp "$proxy/$version.info" "$work/proxy/$mod/@latest"
echo "== readme: the module $mod is this clone's HEAD, $version"
step "go install $mod/cmd/kubectl-nr1@latest"
(cd "$work" && GOPROXY="file://$work/proxy,$(go env GOPROXY)" GONOSUMDB=$mod GOBIN=$work/bin \
  go install "$mod/cmd/kubectl-nr1@latest")
export PATH=$work/bin:$PATH
step "kubectl nr1 top -A"
top=$(kubectl nr1 top -A)
echo "$top"
grep -Eq '^default +resnet50 ' <<<"$top" || fail "kubectl nr1 top -A does not show the ResNet-50 CG"

step "kubectl -n nr1-system create rolebinding nr1-operators --role nr1-agent-reader --group nr1-operators"
kubectl -n nr1-system create rolebinding nr1-operators --role nr1-agent-reader --group nr1-operators
[ "$(kubectl auth can-i get pods/proxy -n nr1-system --as someone --as-group nr1-operators)" = yes ] ||
  fail "the group nr1-operators cannot reach the agents' pod proxy"

uninstall_kustomize
step "kubectl apply -k deploy/kustomize/base"
kubectl apply -k deploy/kustomize/base
daemonset_scheduled
image=$(kubectl -n nr1-system get daemonset nr1-agent -o jsonpath='{.spec.template.spec.containers[0].image}')
[[ $image == ghcr.io/neureality-sdk/nr1-agent:* ]] || fail "kustomize base's image is $image"
uninstall_kustomize

step "helm install nr1-agent deploy/helm/nr1-agent --namespace nr1-system --create-namespace"
helm install nr1-agent deploy/helm/nr1-agent --namespace nr1-system --create-namespace
daemonset_scheduled
[ "$(helm status nr1-agent --namespace nr1-system -o json | jq -r .info.status)" = deployed ] || fail "helm status: not deployed"
step "kubectl label namespace nr1-system pod-security.kubernetes.io/enforce=privileged"
kubectl label namespace nr1-system pod-security.kubernetes.io/enforce=privileged
step "helm uninstall nr1-agent --namespace nr1-system"
helm uninstall nr1-agent --namespace nr1-system
kubectl -n nr1-system wait --for=delete pod -l app.kubernetes.io/name=nr1-agent --timeout=120s
step "kubectl delete namespace nr1-system"
kubectl delete namespace nr1-system
kubectl wait --for=delete namespace/nr1-system --timeout=120s

# The release, into the stack's registry (whose CA Go programs trust by SSL_CERT_FILE, as
# a machine trusts its registry's), and the install from it: the agent's image pulled
# from there.
export REGISTRY=$NR1_REGISTRY SSL_CERT_FILE=$NR1_REGISTRY_CA
step "make release REGISTRY=\$REGISTRY"
make release REGISTRY="$REGISTRY" | tee "$work/release.out"
VERSION=$(sed -n 's/.* --version \([^ ]*\)$/\1/p' "$work/release.out")
[ -n "$VERSION" ] || fail "make release printed no chart version"
step "helm install nr1-agent oci://\$REGISTRY/charts/nr1-agent --version \$VERSION --namespace nr1-system --create-namespace"
helm install nr1-agent oci://$REGISTRY/charts/nr1-agent --version $VERSION --namespace nr1-system --create-namespace
daemonset_scheduled
pulled=
for _ in $(seq 1 60); do
  pulled=$(kubectl -n nr1-system get pods -l app.kubernetes.io/name=nr1-agent -o jsonpath='{.items[0].status.containerStatuses[0].imageID}' 2>/dev/null || true)
  [[ $pulled == "$REGISTRY/nr1-agent@sha256:"* ]] && break
  sleep 1
done
[[ $pulled == "$REGISTRY/nr1-agent@sha256:"* ]] || fail "the agent's image was not pulled from $REGISTRY: $pulled"
helm uninstall nr1-agent --namespace nr1-system
kubectl -n nr1-system wait --for=delete pod -l app.kubernetes.io/name=nr1-agent --timeout=120s
kubectl delete namespace nr1-system
kubectl wait --for=delete namespace/nr1-system --timeout=120s
echo "== readme: the README's install commands did what it says"
cd "$repo"
