#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# make e2e (e2e.sh) and make trust (e2e.sh trust): brings the local node stack up
# (unless it already runs; on $NR1_RUNTIME), deploys the agent, runs the e2e tests (those
# matching $NR1_E2E_RUN, all by default) or the generative trust suite
# (NR1_TRUST_SEED, NR1_TRUST_DURATION), and tears down what it brought up, even on
# failure; then checks that the teardown left nothing behind.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
stack=$here/stack.sh
out=$repo/_output/e2e
mkdir -p "$out"

started=0
if ! "$stack" status | grep -q '^kubelet: running'; then
  # What the machine was before, for the after-teardown check.
  "$stack" machine-state >"$out/before.env"
  started=1
fi

teardown() {
  local rc=$?
  if [ "$started" = 1 ]; then
    "$stack" down || rc=1
    echo "== e2e: checking the machine after teardown"
    NR1_E2E_BEFORE=$out/before.env go test -tags e2eclean -count=1 -v ./deploy/e2e/ || rc=1
  fi
  exit $rc
}
trap teardown EXIT

# helm and Prometheus, which the tests use beside the stack.
"$here/build.sh" tools
start=$SECONDS
"$stack" up
echo "== e2e: stack up in $((SECONDS - start)) s"
"$stack" deploy
eval "$("$stack" env)"
cd "$repo"
if [ "${1:-}" = trust ]; then
  go test -tags e2e,trust -count=1 -timeout 6h -run '^TestTrust$' -v ./deploy/e2e/
  exit 0
fi
# The whole suite takes about 29 minutes on a 2-core machine: the timeout leaves room
# for a slower one, not for a test that hangs for long.
go test -tags e2e -count=1 -timeout 45m -run "${NR1_E2E_RUN:-.}" -v ./deploy/e2e/ ./agent/observe/runtime/
echo "== e2e: the agent's requests during the suites against its RBAC rules"
go test -tags e2eafter -count=1 -v ./deploy/e2e/
