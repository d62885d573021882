#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# make run: the local node stack with the simulated NR1, the agent deployed in NR1_MODE
# (devicePlugin or dra), that mode's example CGs running (deploy/examples/<mode>), and
# what the agent does shown: the node's NR1, the CGs, the metrics, kubectl nr1 top, then
# the agent's log, followed until interrupted unless NR1_FOLLOW=0. It fails when the
# examples do not end as they should: the ResNet-50 CG running with its budget, the
# oversized CG pending with its reason. `make down` tears down.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
stack=$here/stack.sh
mode=${NR1_MODE:-devicePlugin}
follow=${NR1_FOLLOW:-1}

case $mode in
  devicePlugin) examples=$repo/deploy/examples/device-plugin ;;
  dra) examples=$repo/deploy/examples/dra ;;
  *) echo "run: NR1_MODE (make run MODE=...) must be devicePlugin or dra, got \"$mode\"" >&2; exit 2 ;;
esac

fail() {
  echo "run: error: $*" >&2
  kubectl get pods -o wide >&2 || true
  exit 1
}

start=$SECONDS
"$stack" up
"$stack" deploy "$mode"
eval "$("$stack" env)"
# kubectl nr1 is bin/kubectl-nr1, built by make.
export PATH=$repo/bin:$PATH
# Either mode's examples from an earlier run: they share their pods' names.
for d in "$repo"/deploy/examples/*/; do
  kubectl delete -f "$d" --ignore-not-found --wait=true >/dev/null
done
kubectl apply -f "$examples"
kubectl wait --for=condition=Ready pod/resnet50 --timeout=120s >/dev/null ||
  fail "the ResNet-50 CG is not running after 120 s"
kubectl wait --for=jsonpath='{.status.conditions[?(@.type=="PodScheduled")].reason}'=Unschedulable \
  pod/oversized --timeout=60s >/dev/null || fail "the oversized CG was not refused by the scheduler"
agent=$(kubectl -n nr1-system get pods -l app.kubernetes.io/name=nr1-agent -o jsonpath='{.items[0].status.podIP}')
# The agent samples a new CG within its sampling interval, and measures its image and
# writable layers within its partition interval: until then top would show it without
# figures.
deadline=$((SECONDS + 90))
until curl -fsS "http://$agent:9470/metrics" 2>/dev/null | grep -q '^nr1_cg_usage_bytes{.*pod="resnet50",resource="docker_partition"'; do
  [ $SECONDS -lt $deadline ] || fail "the agent has not measured the ResNet-50 CG after 90 s"
  sleep 1
done
echo "== ready in $((SECONDS - start)) s ($mode mode)"
echo
node=$(kubectl get nodes -o jsonpath='{.items[0].metadata.name}')
if [ "$mode" = dra ]; then
  echo "== the node's NR1: ResourceSlice of the driver nr1.neureality.ai, device and capacities"
  kubectl get resourceslices --field-selector "spec.driver=nr1.neureality.ai,spec.nodeName=$node" \
    -o go-template='{{range .items}}{{range .spec.devices}}{{.name}}:{{range $k, $v := .capacity}} {{$k}}={{$v.value}}{{end}}{{"\n"}}{{end}}{{end}}'
  echo
  echo "== allocated: what each claim on the NR1 consumed"
  kubectl get resourceclaims -A \
    -o go-template='{{range .items}}{{if .status.allocation}}{{.metadata.namespace}}/{{.metadata.name}}:{{range .status.allocation.devices.results}}{{range $k, $v := .consumedCapacity}} {{$k}}={{$v}}{{end}}{{end}}{{"\n"}}{{end}}{{end}}'
else
  echo "== the node's NR1: capacity and allocatable"
  kubectl describe node "$node" | sed -n '/^Capacity:/,/^System Info:/p' | grep -E 'Capacity|Allocatable|neureality'
  echo
  kubectl describe node "$node" | sed -n '/^Allocated resources:/,/^Events:/p' | grep -E 'Allocated|Resource|neureality'
fi
echo
kubectl get pods -A -o wide
echo
echo "== the oversized CG: $(kubectl get pod oversized -o jsonpath='{.status.phase}')"
kubectl get pod oversized -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].message}{"\n"}'
echo
echo "== the ResNet-50 CG's health-handler: its budget, as the agent gave it"
kubectl logs resnet50 -c health-handler | head -3
echo
echo "== metrics: curl http://$agent:9470/metrics (and /healthz, /readyz)"
curl -fsS "http://$agent:9470/metrics" | grep '^nr1_' | grep -v '^nr1_sample_duration_seconds_bucket'
echo
echo "== kubectl nr1 top -A"
kubectl nr1 top -A
echo
echo "== kubectl: $("$stack" env)"
if [ "$follow" = 0 ]; then
  echo "== agent log (the last 20 lines; make down tears the stack down):"
  kubectl -n nr1-system logs ds/nr1-agent --tail=20
  exit 0
fi
echo "== agent log (Ctrl-C to stop watching; make down to tear the stack down):"
exec kubectl -n nr1-system logs -f ds/nr1-agent
