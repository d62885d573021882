// SPDX-License-Identifier: Apache-2.0

package inventory

import (
	"fmt"
	"strings"

	"github.com/neureality-sdk/nr1-agent/agent/observe/allocation"
	"github.com/neureality-sdk/nr1-agent/agent/observe/runtime"
	"github.com/neureality-sdk/nr1-agent/agent/view"
	"github.com/neureality-sdk/nr1-agent/internal/untrusted"
	"github.com/neureality-sdk/nr1-agent/nr1"
)

// claimBooks tells what the DRA claims of the NR1's driver gave a container: the claims
// the kubelet lists for it, and those whose shares it holds (its CDI devices, or the
// shares' marks), each with what it consumed as the driver prepared it.
type claimBooks struct {
	claims ClaimSource // nil without the DRA driver
	// cdiDir is the host's CDI directory, where the driver writes the claims' specs: the
	// source of the shares' marks (nr1.ShareOfMount).
	cdiDir string
}

// claim is what a claim the kubelet lists consumed, as the driver prepared it.
func (d claimBooks) claim(k allocation.ClaimKey) (nr1.Amounts, error) {
	if d.claims == nil {
		return nr1.Amounts{}, fmt.Errorf("DRA claim %s/%s of %s, and the agent runs no DRA driver", k.Namespace, k.Name, nr1.DRADriver)
	}
	a, ok := d.claims.ClaimAmounts(k.Namespace, k.Name)
	if !ok {
		return nr1.Amounts{}, fmt.Errorf("DRA claim %s/%s not prepared by the agent's driver", k.Namespace, k.Name)
	}
	return a, nil
}

// held reads the claims of the NR1's driver whose shares the kubelet gave the container,
// as CDI devices or the shares' marks, and what each consumed. A CDI device of no claim
// the driver prepared (no driver, a checkpoint lost) is an error: what the container may
// hold is not known; a mark the agent did not write is ignored and noted in
// cg.IgnoredMarks. A container whose runtime details were not read holds, as far as it
// can tell, none: the CG is then judged with the pod's booking as the kubelet lists it
// (the claims of its regular containers and sidecars). What a CG shows the runtime, a
// status too large to read included, never leaves its allocation unknown: that would
// make it untouchable by its own doing.
func (d claimBooks) held(cg *view.CG, c *runtime.Container) (map[allocation.ClaimKey]nr1.Amounts, error) {
	if c.Unread != "" {
		return nil, nil
	}
	var held map[allocation.ClaimKey]nr1.Amounts
	add := func(ns, name string, a nr1.Amounts) {
		if held == nil {
			held = map[allocation.ClaimKey]nr1.Amounts{}
		}
		held[allocation.ClaimKey{Namespace: ns, Name: name}] = a
	}
	if c.CDIDevicesKnown {
		// The CDI devices the kubelet gave the container, as the runtime tells them: a
		// share of no claim the driver prepared is the node's failing (no driver, a
		// checkpoint lost), and what the container may hold is not known.
		for _, dev := range c.CDIDevices {
			if !strings.HasPrefix(dev, nr1.CDIKind+"=") {
				continue
			}
			if d.claims == nil {
				return nil, fmt.Errorf("holds the DRA share %s, and the agent runs no DRA driver", untrusted.Quote(dev))
			}
			ns, name, a, ok := d.claims.CDIDeviceClaim(dev)
			if !ok {
				return nil, fmt.Errorf("holds the DRA share %s of no claim the agent's driver prepared", untrusted.Quote(dev))
			}
			add(ns, name, a)
		}
		return held, nil
	}
	// The shares' marks (CRI-O, which does not tell the CDI devices): mounts a pod
	// allowed a hostPath can make too. A mark counts only as the agent wrote it: of a
	// share of a claim its driver prepared, in the pod's namespace. Any other is ignored
	// and reported; it never leaves the allocation unknown.
	for _, m := range c.ShareMounts {
		dev, ok := nr1.ShareOfMount(d.cdiDir, m.Source, m.Destination)
		if !ok {
			continue
		}
		var ns, name string
		var a nr1.Amounts
		if d.claims != nil {
			ns, name, a, ok = d.claims.CDIDeviceClaim(dev)
			if !ok {
				// Its pod's containers stopped, and the kubelet unprepared the claim: the
				// agent's view of them lags. The mark is the agent's own.
				ns, name, a, ok = d.claims.ReleasedCDIDeviceClaim(dev)
			}
		}
		switch {
		case !ok:
			cg.IgnoredMarks = append(cg.IgnoredMarks, fmt.Sprintf("container %s: %s marks the share %s of no claim the agent's driver prepared",
				c.Name, untrusted.Quote(m.Destination), untrusted.Quote(dev)))
		case ns != cg.Namespace:
			cg.IgnoredMarks = append(cg.IgnoredMarks, fmt.Sprintf("container %s: %s marks a share of claim %s/%s, of another namespace",
				c.Name, untrusted.Quote(m.Destination), ns, name))
		default:
			add(ns, name, a)
		}
	}
	return held, nil
}
