#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# make release: pushes what a cluster installs to an OCI registry, as a stranger's cluster
# pulls it: the agent's image, every platform of its archive (make image), as
# REGISTRY/nr1-agent:VERSION, and the chart, version VERSION (without its v) and
# appVersion VERSION, its image that one, as oci://REGISTRY/charts/nr1-agent.
# Usage: release.sh REGISTRY VERSION. REGISTRY_CA: the CA to trust the registry by, where
# the machine's roots do not; logins are helm's and crane's own (helm registry login,
# crane auth login). NR1_IMAGES and NR1_CHART name the images' directory and the chart
# (this tree's by default): another tree's release, pushed by this script.
set -euo pipefail
registry=${1:?usage: release.sh REGISTRY VERSION} version=${2:?usage: release.sh REGISTRY VERSION}
repo=$(cd "$(dirname "$0")/../.." && pwd)
images=${NR1_IMAGES:-$repo/_output/images}
chart=${NR1_CHART:-$repo/deploy/helm/nr1-agent}
chart_version=${version#v}
if [ -n "${REGISTRY_CA:-}" ]; then
  # helm and crane are Go programs: they trust this file's CAs besides the system's.
  export SSL_CERT_FILE=$REGISTRY_CA
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

mkdir "$work/layout"
tar -xf "$images/nr1-agent.tar" -C "$work/layout"
crane push "$work/layout" "$registry/nr1-agent:$version"

# The chart as released names the image it was released with; the rest is the chart's.
cp -r "$chart" "$work/chart"
sed -i "s|^  repository: .*|  repository: $registry/nr1-agent|" "$work/chart/values.yaml"
grep -q "^  repository: $registry/nr1-agent\$" "$work/chart/values.yaml" ||
  { echo "release: the chart's image.repository was not set to $registry/nr1-agent" >&2; exit 1; }
helm package "$work/chart" --version "$chart_version" --app-version "$version" --destination "$work" >/dev/null
helm push "$work/nr1-agent-$chart_version.tgz" "oci://$registry/charts"
echo "released $version: image $registry/nr1-agent:$version, chart oci://$registry/charts/nr1-agent --version $chart_version"
