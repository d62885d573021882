#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# make dist-check: the release make dist wrote, checked as krew and kubectl use it. The
# manifest by krew's own validator; each archive against SHA256SUMS, holding exactly
# LICENSE, kubectl-nr1 and kubectl_complete-nr1, owned by 0, of mtime 0, in order;
# each installed by krew from the manifest and the local archive (offline, as the
# README writes it), the license installed too; this machine's plugin run for its
# version and its completion through the helper; an SBOM per binary and platform; then a
# second make dist, which must write the same bytes and leave git status as it was.
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${KREW:?the directory of krew and validate-krew-manifest}" "${DIST:=_output/dist}" "${VERSION:=$(make -s version)}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# step names the README's command run next, as the README writes it (deploy/ci's test
# checks that the README still does).
step() { echo "== dist: $*"; }
fail() { echo "dist-check: error: $*" >&2; exit 1; }

manifest=$DIST/nr1.yaml
sums=kubectl-nr1_${VERSION}_SHA256SUMS
echo "== dist: $manifest by krew's validate-krew-manifest"
"$KREW/validate-krew-manifest" -manifest "$manifest" -skip-install
(cd "$DIST" && sha256sum --quiet --strict -c "$sums") || fail "$sums does not match the archives"

platforms=$(grep -c '^  - bin: kubectl-nr1$' "$manifest") || true
archives=("$DIST"/kubectl-nr1_"$VERSION"_*.tar.gz)
[ "$platforms" = "${#archives[@]}" ] || fail "$manifest has $platforms platforms for ${#archives[@]} archives"
[ "$(wc -l <"$DIST/$sums")" = "${#archives[@]}" ] || fail "$sums does not list every archive"
for a in "${archives[@]}"; do
  listing=$(TZ=UTC tar --numeric-owner -tvzf "$a" | awk '{print $1, $2, $4, $5, $6}')
  want="-rw-r--r-- 0/0 1970-01-01 00:00 LICENSE
-rwxr-xr-x 0/0 1970-01-01 00:00 kubectl-nr1
-rwxr-xr-x 0/0 1970-01-01 00:00 kubectl_complete-nr1"
  [ "$listing" = "$want" ] || fail "$a holds, as listed by tar:
$listing
want:
$want"
  # Each platform as krew installs it (the validator's install, which downloads, from
  # the archive here): the plugin linked, its license beside it.
  base=${a##*/}
  os_arch=${base#kubectl-nr1_"$VERSION"_}
  os_arch=${os_arch%.tar.gz}
  root=$work/krew-$os_arch
  KREW_ROOT=$root KREW_OS=${os_arch%_*} KREW_ARCH=${os_arch#*_} KREW_NO_UPGRADE_CHECK=1 \
    "$KREW/krew" install --manifest="$manifest" --archive="$a" >"$work/install.log" 2>&1 ||
    fail "krew install of $a: $(cat "$work/install.log")"
  for f in LICENSE kubectl-nr1 kubectl_complete-nr1; do
    [ -f "$root/store/nr1/$VERSION/$f" ] || fail "krew installed no $f from $a"
  done
  [ -L "$root/bin/kubectl-nr1" ] || fail "krew linked no kubectl-nr1 from $a"
  echo "== dist: $base installed by krew for ${os_arch/_//}"
done

# This machine's, installed as the README says, run.
step "kubectl krew install --manifest=_output/dist/nr1.yaml --archive=_output/dist/kubectl-nr1_\$(make -s version)_\$(go env GOOS)_\$(go env GOARCH).tar.gz"
root=$work/krew
KREW_ROOT=$root KREW_NO_UPGRADE_CHECK=1 "$KREW/krew" install --manifest="$manifest" \
  --archive="$DIST/kubectl-nr1_${VERSION}_$(go env GOOS)_$(go env GOARCH).tar.gz" >"$work/install.log" 2>&1 ||
  fail "krew install: $(cat "$work/install.log")"
got=$("$root/bin/kubectl-nr1" version)
[ "$got" = "$VERSION" ] || fail "kubectl nr1 version says $got, built as $VERSION"
# kubectl runs the helper with the words after nr1, the last the one being typed.
completions=$("$root/store/nr1/$VERSION/kubectl_complete-nr1" top -o '' 2>/dev/null)
for want in json yaml wide ':4'; do
  grep -q "^$want" <<<"$completions" || fail "kubectl_complete-nr1 top -o '' offers no $want: $completions"
done
echo "== dist: kubectl nr1 $got installed by krew, its completion answers"

# An SBOM of each binary released, per platform: CycloneDX, the binary's main package
# as its component, the modules it links with the licenses found in them.
sboms=0
for bin in kubectl-nr1:linux_amd64,linux_arm64,darwin_amd64,darwin_arm64 nr1-agent:linux_amd64,linux_arm64 nr1-load:linux_amd64,linux_arm64; do
  name=${bin%%:*} platforms=${bin#*:}
  for platform in ${platforms//,/ }; do
      f=$DIST/sbom/${name}_${VERSION}_${platform}.cdx.json
      [ -f "$f" ] || fail "no SBOM $f"
      jq -e --arg main "cmd/$name" --arg os "${platform%_*}" --arg arch "${platform#*_}" '
        .bomFormat == "CycloneDX" and (.metadata.component.purl | endswith("#" + $main)) and
        (.metadata.component.purl | contains("goos=" + $os) and contains("goarch=" + $arch)) and
        (.components | length) > 0 and
        ([.components[] | select(.evidence.licenses // .licenses)] | length) > 0' "$f" >/dev/null ||
        fail "$f is not the CycloneDX SBOM of cmd/$name for $platform with its modules' licenses"
      sboms=$((sboms + 1))
  done
done
jq -e '[.components[].name] | index("github.com/cilium/ebpf") != null' "$DIST/sbom/nr1-agent_${VERSION}_linux_arm64.cdx.json" >/dev/null ||
  fail "the agent's SBOM does not list cilium/ebpf, which it links"
echo "== dist: $sboms SBOMs checked"

# make dist again: the same bytes (archives, sums, manifest, SBOMs), nothing for git.
status=$(git status --porcelain)
cp "$DIST/$sums" "$DIST/nr1.yaml" "$work/"
cp -r "$DIST/sbom" "$work/sbom"
make --no-print-directory dist VERSION="$VERSION" >"$work/dist.log" 2>&1 || fail "make dist, again: $(cat "$work/dist.log")"
cmp -s "$work/$sums" "$DIST/$sums" || fail "make dist, again, wrote other archives: $(diff "$work/$sums" "$DIST/$sums")"
cmp -s "$work/nr1.yaml" "$DIST/nr1.yaml" || fail "make dist, again, wrote another manifest"
diff -r "$work/sbom" "$DIST/sbom" >/dev/null || fail "make dist, again, wrote other SBOMs"
[ "$(git status --porcelain)" = "$status" ] || fail "make dist changed git status: $(git status --porcelain)"
[ -z "$(git status --porcelain --untracked-files=all -- "$DIST" bin)" ] || fail "make dist's outputs are not ignored by git"
echo "== dist: ${#archives[@]} archives, their sums and nr1.yaml checked; a second make dist wrote the same"
