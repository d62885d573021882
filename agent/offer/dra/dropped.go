// SPDX-License-Identifier: Apache-2.0

package dra

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
)

// ReasonFieldsDropped is the reason of the Node's Event when the API server stored the
// node's ResourceSlice without fields the driver set.
const ReasonFieldsDropped = "NR1ResourceSliceFieldsDropped"

// featureOf names the API server feature gate a dropped field belongs to: an API
// server (or a version) without it accepts the slice and drops the field, and the NR1
// is then not what the scheduler allocates (without allowMultipleAllocations it is one
// claim's; without a request policy a claim takes all of a capacity it does not name).
func featureOf(field string) string {
	switch {
	case strings.HasSuffix(field, ".allowMultipleAllocations"), strings.Contains(field, ".requestPolicy"):
		return "DRAConsumableCapacity"
	case strings.Contains(field, ".taints"):
		return "DRADeviceTaints"
	}
	return ""
}

// droppedFields lists, as JSON paths, the fields set in sent that stored lacks: what
// the API server dropped. A field the API server added or defaulted is not one.
func droppedFields(sent, stored *resourceapi.ResourceSliceSpec) ([]string, error) {
	var a, b any
	for _, x := range []struct {
		spec *resourceapi.ResourceSliceSpec
		into *any
	}{{sent, &a}, {stored, &b}} {
		raw, err := json.Marshal(x.spec)
		if err != nil {
			return nil, fmt.Errorf("ResourceSlice spec: %w", err)
		}
		if err := json.Unmarshal(raw, x.into); err != nil {
			return nil, fmt.Errorf("ResourceSlice spec: %w", err)
		}
	}
	var out []string
	missing("spec", a, b, &out)
	return out, nil
}

func missing(path string, sent, stored any, out *[]string) {
	switch s := sent.(type) {
	case map[string]any:
		st, _ := stored.(map[string]any)
		keys := make([]string, 0, len(s))
		for k := range s {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if v, ok := st[k]; ok {
				missing(path+"."+k, s[k], v, out)
			} else {
				*out = append(*out, path+"."+k)
			}
		}
	case []any:
		st, _ := stored.([]any)
		for i := range s {
			p := path + "[" + strconv.Itoa(i) + "]"
			if i < len(st) {
				missing(p, s[i], st[i], out)
			} else {
				*out = append(*out, p)
			}
		}
	}
}

// errFieldsDropped says which fields the API server dropped and what to do about it.
func errFieldsDropped(slice string, fields []string) error {
	var gates []string
	for _, f := range fields {
		if g := featureOf(f); g != "" && !slices.Contains(gates, g) {
			gates = append(gates, g)
		}
	}
	enable := "the feature gates these fields belong to"
	if len(gates) > 0 {
		enable = "the " + strings.Join(gates, " and ") + " feature gate"
	}
	return fmt.Errorf("the API server dropped fields of ResourceSlice %s that the NR1's driver set: %s; the NR1 is not offered as published: enable %s on the API server and the scheduler, or run the agent with mode: devicePlugin",
		slice, strings.Join(fields, ", "), enable)
}

// checkStored compares the slice the API server stored with what was sent, and
// reports the fields it dropped, once each time they change: an error logged, a
// Warning Event on the Node, and the driver's stage failing until a slice is stored
// whole.
func (d *Driver) checkStored(ctx context.Context, api API, sent, stored *resourceapi.ResourceSlice) {
	fields, err := droppedFields(&sent.Spec, &stored.Spec)
	if err != nil {
		d.log.Error("comparing the stored ResourceSlice with the one sent", "slice", stored.Name, "err", err)
		return
	}
	d.noteDropped(ctx, api, stored.Name, fields)
}

// noteDropped records the fields dropped from the node's slice (none: it is whole).
func (d *Driver) noteDropped(ctx context.Context, api API, slice string, fields []string) {
	d.sliceMu.Lock()
	if slices.Equal(fields, d.dropped) {
		d.sliceMu.Unlock()
		return
	}
	d.dropped = fields
	if len(fields) == 0 {
		d.sliceErr = nil
		d.sliceMu.Unlock()
		d.log.Info("the API server stores the NR1's ResourceSlice whole again", "slice", slice)
		return
	}
	err := errFieldsDropped(slice, fields)
	d.sliceErr = err
	// The Event is written unlocked: the stage's health is read at every scrape, and must
	// not wait on the API server.
	d.sliceMu.Unlock()
	d.log.Error("NR1 ResourceSlice stored without fields the driver set", "slice", slice, "fields", fields, "err", err)
	if err := api.NodeEvent(ctx, d.node, corev1.EventTypeWarning, ReasonFieldsDropped, err.Error()); err != nil {
		d.log.Warn("Event on the node not written", "node", d.node, "reason", ReasonFieldsDropped, "err", err)
	}
}

// SliceHealth is nil while the API server stores the node's ResourceSlice as the
// driver sent it, and why not otherwise.
func (d *Driver) SliceHealth() error {
	d.sliceMu.Lock()
	defer d.sliceMu.Unlock()
	return d.sliceErr
}
