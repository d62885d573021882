#!/usr/bin/env bash
# make run: the local node stack with the simulated NR1, the agent deployed, the example
# CGs running, and what the agent does shown until interrupted. `make down` tears down.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
stack=$here/stack.sh

start=$SECONDS
"$stack" up
"$stack" deploy
eval "$("$stack" env)"
kubectl delete -f "$repo/deploy/examples/" --ignore-not-found --wait=true >/dev/null
kubectl apply -f "$repo/deploy/examples/"
kubectl wait --for=condition=Ready pod/resnet50 --timeout=60s >/dev/null || true
echo "== ready in $((SECONDS - start)) s"
echo
kubectl describe node | sed -n '/^Capacity:/,/^System Info:/p' | grep -E 'Capacity|Allocatable|neureality'
echo
kubectl describe node | sed -n '/^Allocated resources:/,/^Events:/p' | grep -E 'Allocated|Resource|neureality'
echo
kubectl get pods -A -o wide
echo
echo "== the oversized CG:"
kubectl get events --field-selector involvedObject.name=oversized,reason=FailedScheduling -o custom-columns=MESSAGE:.message | tail -1
echo
echo "== the ResNet-50 CG's health-handler (its budget comes from the agent's Allocate):"
kubectl logs resnet50 -c health-handler | head -3
agent=$(kubectl -n nr1-system get pods -l app.kubernetes.io/name=nr1-agent -o jsonpath='{.items[0].status.podIP}')
echo
echo "== metrics: curl http://$agent:9470/metrics (and /healthz, /readyz)"
curl -fsS "http://$agent:9470/metrics" | grep '^nr1_' || true
echo
echo "== kubectl: $("$stack" env)"
echo "== agent log (Ctrl-C to stop watching; make down to tear the stack down):"
exec kubectl -n nr1-system logs -f ds/nr1-agent
