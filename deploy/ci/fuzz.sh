#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs every fuzz target of the module for FUZZTIME each (make fuzz). `go test -fuzz`
# takes one target per package run, so the targets are found by their declarations: a
# new one is fuzzed without being listed anywhere. A crasher is written by go test to
# the package's testdata/fuzz/<target>/, where it stays as a seed once the code is fixed.
set -euo pipefail
cd "$(dirname "$0")/../.."
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-20s}

# "<package dir> <target>" for every `func FuzzX(f *testing.F)` in a test file.
mapfile -t targets < <(
	grep -rEo --include='*_test.go' --exclude-dir=_output --exclude-dir=.git \
		'^func Fuzz[A-Za-z0-9_]*\(f \*testing\.F\)' . |
		sed -E 's|^(.*)/[^/]*_test\.go:func (Fuzz[A-Za-z0-9_]*)\(.*$|\1 \2|' | sort
)
if [ ${#targets[@]} -eq 0 ]; then
	echo "no fuzz targets found" >&2
	exit 1
fi

echo "fuzzing ${#targets[@]} targets for $FUZZTIME each"
failed=()
start=$SECONDS
for t in "${targets[@]}"; do
	read -r dir name <<<"$t"
	echo "== $name ($dir)"
	if ! "$GO" test -run '^$' -fuzz "^${name}\$" -fuzztime "$FUZZTIME" "$dir"; then
		failed+=("$name ($dir)")
	fi
done
echo "fuzzed ${#targets[@]} targets in $((SECONDS - start))s"
if [ ${#failed[@]} -gt 0 ]; then
	printf 'failed: %s\n' "${failed[@]}" >&2
	exit 1
fi
