// SPDX-License-Identifier: Apache-2.0

package nr1

import (
	"path"
	"strings"
)

// ShareDir is where a container given a DRA share of the NR1 finds the CDI spec of the
// share's claim, read-only, one file per share: its budget, and the mark by which the
// agent tells which shares a container holds when the runtime does not say which CDI
// devices the kubelet gave it (CRI-O's verbose status does not).
const ShareDir = "/run/" + DRADriver + "/shares"

// CDISpecFile is the name of the CDI spec the DRA driver writes for a claim, in the CDI
// directory: named by the claim's UID, never reused.
func CDISpecFile(claimUID string) string { return DRADriver + "_" + claimUID + ".json" }

// ShareMount is the bind mount of a share's CDI device: the claim's spec (under cdiDir,
// the host's CDI directory) at ShareDir/<device>.json in the container.
func ShareMount(cdiDir, claimUID, device string) (source, destination string) {
	return path.Join(cdiDir, CDISpecFile(claimUID)), path.Join(ShareDir, device+".json")
}

// ShareOfMount names the CDI device ("neureality.ai/nr1=<device>") whose share a mount
// of a container's runtime spec marks: a mount at ShareDir/<device>.json of the spec of
// the claim the device belongs to, in cdiDir. A pod cannot make such a mount without a
// hostPath volume of the CDI directory; any other mount marks nothing.
func ShareOfMount(cdiDir, source, destination string) (string, bool) {
	dir, file := path.Split(destination)
	device, ok := strings.CutSuffix(file, ".json")
	if !ok || path.Clean(dir) != ShareDir || device == "" {
		return "", false
	}
	specDir, spec := path.Split(source)
	uid, ok := strings.CutPrefix(spec, DRADriver+"_")
	if !ok || path.Clean(specDir) != path.Clean(cdiDir) {
		return "", false
	}
	uid, ok = strings.CutSuffix(uid, ".json")
	if !ok || uid == "" || !strings.HasPrefix(device, uid+"-") || len(device) == len(uid)+1 {
		return "", false
	}
	return CDIKind + "=" + device, true
}
