// SPDX-License-Identifier: Apache-2.0

package dra

import (
	"context"
	"fmt"
	"slices"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/neureality-sdk/nr1-agent/nr1/device"
)

// How the node's ResourceSlice is kept: checked again every sliceResync (someone may
// have changed or deleted it), and after a failed attempt every sliceRetry; each call
// bounded by sliceTimeout.
const (
	sliceResync  = time.Minute
	sliceRetry   = 5 * time.Second
	sliceTimeout = 10 * time.Second
)

// publish keeps the node's ResourceSlice what the NR1 is, until ctx ends.
func (d *Driver) publish(ctx context.Context, api API) {
	failing := false
	for {
		h, changed := d.health.Load()
		wait := sliceResync
		if err := d.ensureSlice(ctx, api, h); err != nil {
			if !failing {
				d.log.Error("publishing the NR1's ResourceSlice (retrying)", "err", err)
			}
			failing, wait = true, sliceRetry
		} else if failing {
			d.log.Info("the NR1's ResourceSlice is published again")
			failing = false
		}
		t := d.clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-changed:
		case <-t.C():
		}
		t.Stop()
	}
}

// Slice is the node's ResourceSlice for health h: the node's pool of one slice holding
// the NR1, owned by the node so that it goes with it.
func (d *Driver) Slice(h device.Health) *resourceapi.ResourceSlice {
	healthy, reason := overall(h)
	return &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{GenerateName: d.node + "-" + DriverName + "-"},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   DriverName,
			NodeName: ptr.To(d.node),
			Pool:     resourceapi.ResourcePool{Name: d.node, Generation: 1, ResourceSliceCount: 1},
			Devices:  []resourceapi.Device{Device(d.capacity, d.attributes, healthy, reason)},
		},
	}
}

// ensureSlice creates the node's slice, or updates the one there when it is not what
// the NR1 is. Slices of the pool beyond one (left by an interrupted run) are outdated
// by a newer pool generation, which the scheduler alone reads.
func (d *Driver) ensureSlice(ctx context.Context, api API, h device.Health) error {
	ctx, cancel := context.WithTimeout(ctx, sliceTimeout)
	defer cancel()
	want := d.Slice(h)
	have, err := api.Slices(ctx, d.node, DriverName)
	if err != nil {
		return fmt.Errorf("ResourceSlices of node %s: %w", d.node, err)
	}
	if len(have) == 0 {
		uid, err := api.NodeUID(ctx, d.node)
		if err != nil {
			return fmt.Errorf("node %s, the owner of its ResourceSlice: %w", d.node, err)
		}
		want.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: d.node, UID: uid, Controller: ptr.To(true)}}
		s, err := api.CreateSlice(ctx, want)
		if err != nil {
			return fmt.Errorf("creating the ResourceSlice of node %s: %w", d.node, err)
		}
		d.log.Info("ResourceSlice created", "name", s.Name, "pool", d.node)
		d.checkStored(ctx, api, want, s)
		return nil
	}
	// The newest slice is kept; any other of the pool must be older than it.
	s := have[0]
	for _, o := range have[1:] {
		if o.Spec.Pool.Generation > s.Spec.Pool.Generation {
			s = o
		}
	}
	generation := s.Spec.Pool.Generation
	for _, o := range have {
		if o.Name != s.Name && o.Spec.Pool.Generation >= generation {
			generation = o.Spec.Pool.Generation + 1
		}
	}
	keepTaintTimes(want.Spec.Devices, s.Spec.Devices)
	if generation == s.Spec.Pool.Generation && s.Spec.Pool.ResourceSliceCount == 1 && equality.Semantic.DeepEqual(s.Spec.Devices, want.Spec.Devices) {
		d.noteDropped(ctx, api, s.Name, nil)
		return nil
	}
	s.Spec.Devices = want.Spec.Devices
	s.Spec.Pool.Generation, s.Spec.Pool.ResourceSliceCount = generation, 1
	stored, err := api.UpdateSlice(ctx, &s)
	if err != nil {
		return fmt.Errorf("updating ResourceSlice %s: %w", s.Name, err)
	}
	d.checkStored(ctx, api, &s, stored)
	healthy, _ := overall(h)
	d.log.Info("ResourceSlice updated", "name", s.Name, "healthy", healthy, "generation", generation, "slices", len(have))
	return nil
}

// keepTaintTimes gives each taint of want the time the API server stamped on the same
// taint (key, value, effect) of the device in have: the agent writes none, and a slice
// compared without it would differ at every check and be written again.
func keepTaintTimes(want, have []resourceapi.Device) {
	for i := range want {
		k := slices.IndexFunc(have, func(h resourceapi.Device) bool { return h.Name == want[i].Name })
		if k < 0 {
			continue
		}
		for j := range want[i].Taints {
			w := &want[i].Taints[j]
			for _, h := range have[k].Taints {
				if w.TimeAdded == nil && h.Key == w.Key && h.Value == w.Value && h.Effect == w.Effect {
					w.TimeAdded = h.TimeAdded
				}
			}
		}
	}
}
