#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# make trust-mutants: the trust suite shows that it can fail. Each mutant
# (deploy/trust/mutate -list) is the agent broken on purpose by one change of its
# source, applied to a copy of the tree, built as the stack's image and deployed; a
# short trust run in device-plugin mode, from a seed whose plan goes over early and
# often and without faults, must then fail by its oracle (a miss or a false action), and
# says what caught it; the same run against the real agent first must pass (the
# control). The stack is brought up unless it runs (and torn down after), and the real
# agent deployed again.
# NR1_MUTANTS (a regular expression of names) runs some of them only. The ladders'
# mutants run with the budget gate off; NR1_MUTANT_JUDGE=gate (make trust-mutants-gate)
# runs the gate's mutants instead, with the gate on in the control and in each trial.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
stack=$repo/deploy/local/stack.sh
out=$repo/_output/mutants
mkdir -p "$out"
# Seed 204 plays 8 CGs in 2 minutes: 4 going over in the first 45 s (2 of them on
# queues by less than twice their booking, throttled before they are killed, 2 several
# times over), 2 uncertain by their own doing (an io_uring larger than a scan reads, a
# flood of a million fds).
seed=${NR1_MUTANT_SEED:-204}
duration=${NR1_MUTANT_DURATION:-4m}
judge=${NR1_MUTANT_JUDGE:-ladder}
case "$judge" in
  ladder) prevention=off ;;
  gate) prevention=on ;;
  *) echo "NR1_MUTANT_JUDGE=$judge: want ladder or gate"; exit 2 ;;
esac

started=0
if ! "$stack" status | grep -q '^kubelet: running'; then
  "$stack" machine-state >"$out/before.env"
  started=1
fi
restore() {
  local rc=$?
  echo "== trust-mutants: the real agent deployed again"
  NR1_IMAGES=$repo/_output/images "$stack" up >/dev/null && "$stack" deploy || rc=1
  if [ "$started" = 1 ]; then
    "$stack" down || rc=1
  fi
  exit $rc
}
"$repo/deploy/local/build.sh" tools
NR1_IMAGES=$repo/_output/images "$stack" up
trap restore EXIT

# trial NAME: the short trust run against the agent deployed, its log in $out/NAME.log.
trial() {
  eval "$("$stack" env)"
  # The ladders' mutants are judged by CGs the ladders act on: the budget gate, which
  # would refuse their queue overruns first, stays off. The gate's are judged by the
  # overruns it must refuse.
  NR1_TRUST_SEED=$seed NR1_TRUST_DURATION=$duration NR1_TRUST_MODES=devicePlugin NR1_TRUST_FAULTS=0 NR1_TRUST_PREVENTION=$prevention \
    go test -tags e2e,trust -count=1 -timeout 30m -run '^TestTrust$' -v ./deploy/e2e/ >"$out/$1.log" 2>&1
}

# The control: the real agent passes the same run, so that what fails against a mutant
# is the mutant's doing, not the seed's or the stack's.
echo "== trust-mutants: the real agent (control, the budget gate $prevention)"
"$stack" deploy
if ! trial control; then
  echo "the trust run failed against the real agent: no mutant can be judged by it ($out/control.log)"
  grep -m5 -E 'MISS:|FALSE ACTION|_test.go:[0-9]+:' "$out/control.log" | sed 's/^/    /'
  exit 1
fi

survived=()
ran=0
while IFS=$'\t' read -r name what _; do
  ran=$((ran + 1))
  echo "== trust-mutants: $name ($what)"
  t0=$SECONDS
  work=$(mktemp -d)
  # The tree as it is, uncommitted changes included, without its build outputs.
  tar -C "$repo" --exclude=./_output --exclude=./bin --exclude=./.git -cf - . | tar -C "$work" -xf -
  go run ./deploy/trust/mutate -name "$name" -dir "$work"
  # The stack runs the host's architecture: the mutant is built for it alone.
  make -C "$work" image ARCHES="$(go env GOARCH)" >"$out/$name.build.log" 2>&1 || { echo "building the $name agent failed: $out/$name.build.log"; exit 1; }
  NR1_IMAGES=$work/_output/images "$stack" up >/dev/null
  "$stack" deploy
  if trial "$name"; then
    echo "SURVIVED: the trust suite passed against $name ($what): $out/$name.log"
    survived+=("$name")
  elif ! grep -qE 'MISS:|FALSE ACTION' "$out/$name.log"; then
    # Failed, but not by its oracle: the mutant is not shown caught.
    echo "NOT JUDGED: the trust run against $name failed without a miss or a false action: $out/$name.log"
    grep -m3 -E '_test.go:[0-9]+:' "$out/$name.log" | sed 's/^/    /'
    survived+=("$name")
  else
    echo "caught ($(grep -cE 'MISS:|FALSE ACTION' "$out/$name.log") failures), first:"
    # -m3, not head: under pipefail a head that stops reading fails the script (SIGPIPE).
    grep -m3 -E 'MISS:|FALSE ACTION' "$out/$name.log" | sed 's/^ */    /'
    grep -E '^\s+trust_test.go:[0-9]+: (devicePlugin|MODE)' "$out/$name.log" | tail -2 | sed 's/^ */    /' || true
  fi
  rm -rf "$work"
  echo "    ($((SECONDS - t0)) s)"
done < <(cd "$repo" && go run ./deploy/trust/mutate -list | grep -E "^(${NR1_MUTANTS:-.*})"$'\t' | grep -E $'\t'"$judge\$")
if [ "$ran" = 0 ]; then
  echo "trust-mutants: NR1_MUTANTS=${NR1_MUTANTS:-} names no $judge mutant (deploy/trust/mutate -list)"
  exit 1
fi
if [ ${#survived[@]} -gt 0 ]; then
  echo "trust-mutants: ${#survived[@]} mutant(s) not caught: ${survived[*]}"
  exit 1
fi
echo "trust-mutants: every mutant caught"
