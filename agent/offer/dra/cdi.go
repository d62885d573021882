// SPDX-License-Identifier: Apache-2.0

package dra

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/neureality-sdk/nr1-agent/internal/atomicfile"
	"github.com/neureality-sdk/nr1-agent/nr1"
	"github.com/neureality-sdk/nr1-agent/nr1/device"
)

// cdiKind is the CDI vendor and class of the NR1's shares.
const cdiKind = nr1.CDIKind

// CDI writes one spec per prepared claim into the runtime's CDI directory: per share a
// device giving the container the NR1 files of the resources the share holds some of
// (character devices as device nodes, the DMA files as bind mounts, as Allocate does),
// the share's budget in the same NR1_* variables, and the claim's spec itself, read-only
// at nr1.ShareDir/<device>.json: the mark by which the agent knows which shares a
// container holds on a runtime that does not say which CDI devices it was given.
type CDI struct {
	Dir   string
	Files []device.ResolvedFile
}

// specPath is the claim's spec file: named by the claim UID, never reused, so that a
// runtime's cached spec cannot stand for another claim.
func (c CDI) specPath(claim Claim) string {
	return filepath.Join(c.Dir, nr1.CDISpecFile(string(claim.UID)))
}

// deviceName is a share's CDI device name within the kind.
func deviceName(claim Claim, i int, s Share) string {
	if s.ShareID != "" {
		return string(claim.UID) + "-" + s.ShareID
	}
	return string(claim.UID) + "-" + strconv.Itoa(i)
}

// Write writes the claim's spec and sets each share's CDIDevice.
func (c CDI) Write(claim *Claim) error {
	spec := cdispec.Spec{Kind: cdiKind, Devices: make([]cdispec.Device, 0, len(claim.Shares))}
	for i := range claim.Shares {
		s := &claim.Shares[i]
		name := deviceName(*claim, i, *s)
		s.CDIDevice = cdiKind + "=" + name
		e := c.edits(s.Amounts)
		source, destination := nr1.ShareMount(c.Dir, string(claim.UID), name)
		e.Mounts = append(e.Mounts, &cdispec.Mount{HostPath: source, ContainerPath: destination, Options: []string{"bind", "ro"}})
		spec.Devices = append(spec.Devices, cdispec.Device{Name: name, ContainerEdits: e})
	}
	v, err := cdispec.MinimumRequiredVersion(&spec)
	if err != nil {
		return fmt.Errorf("CDI spec of claim %s/%s: %w", claim.Namespace, claim.Name, err)
	}
	spec.Version = v
	b, err := json.Marshal(spec)
	if err != nil {
		return fmt.Errorf("CDI spec of claim %s/%s: %w", claim.Namespace, claim.Name, err)
	}
	if err := atomicfile.Write(c.specPath(*claim), b, 0o644, 0o755); err != nil {
		return fmt.Errorf("CDI spec of claim %s/%s: %w", claim.Namespace, claim.Name, err)
	}
	return nil
}

// Ensure writes the spec of a claim prepared already if it is gone.
func (c CDI) Ensure(claim Claim) error {
	if _, err := os.Stat(c.specPath(claim)); !errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return c.Write(&claim)
}

// Remove removes the claim's spec; none is no error.
func (c CDI) Remove(claim Claim) error {
	if err := os.Remove(c.specPath(claim)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("CDI spec of claim %s/%s: %w", claim.Namespace, claim.Name, err)
	}
	return nil
}

func (c CDI) edits(a nr1.Amounts) cdispec.ContainerEdits {
	var e cdispec.ContainerEdits
	for _, r := range nr1.All {
		e.Env = append(e.Env, r.EnvVar()+"="+strconv.FormatInt(int64(a[r]), 10))
	}
	seen := map[string]bool{}
	for _, f := range c.Files {
		if a[f.Resource] == 0 || seen[f.Path] {
			continue
		}
		seen[f.Path] = true
		if f.Char {
			e.DeviceNodes = append(e.DeviceNodes, &cdispec.DeviceNode{Path: f.InContainer(), HostPath: f.Path, Type: "c", Permissions: "rw"})
			continue
		}
		e.Mounts = append(e.Mounts, &cdispec.Mount{HostPath: f.Path, ContainerPath: f.InContainer(), Options: []string{"bind", "rw"}})
	}
	return e
}
