// SPDX-License-Identifier: Apache-2.0

package nodelabels

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/neureality-sdk/nr1-agent/internal/atomicfile"
	"github.com/neureality-sdk/nr1-agent/nr1"
)

// Prefix starts every label the agent writes; the agent removes those it no longer
// finds. Node Feature Discovery's neureality.ai/nr1 is not among them.
const Prefix = "neureality.ai/nr1."

// The labels the agent writes besides the capacities.
const (
	ModeLabel          = Prefix + "mode"
	DriverVersionLabel = Prefix + "driver-version"
	// PreventionLabel says whether the budget gate refuses opens past a CG's booking on
	// the node: on, off, or unavailable (turned on, but the kernel would not load it).
	PreventionLabel = Prefix + "prevention"
)

// The modes a node's label may select.
const (
	ModeDevicePlugin = "devicePlugin"
	ModeDRA          = "dra"
)

// CapacityLabel is the label holding r's capacity, named after its resource
// (neureality.ai/nr1.compute_dma_memory_in_mb), in the resource's units.
func CapacityLabel(r nr1.Resource) string {
	return Prefix + strings.TrimPrefix(r.Name(), nr1.Domain+"/")
}

// Found are the labels saying what the agent found: the mode it runs in, each
// resource's capacity, and the driver's version where the driver declares one that a
// label can hold.
func Found(mode string, capacity nr1.Amounts, driverVersion string) map[string]string {
	out := map[string]string{ModeLabel: mode}
	for _, r := range nr1.All {
		out[CapacityLabel(r)] = strconv.FormatInt(int64(capacity[r]), 10)
	}
	if driverVersion != "" && len(validation.IsValidLabelValue(driverVersion)) == 0 {
		out[DriverVersionLabel] = driverVersion
	}
	return out
}

// Selected is the mode the node's label key selects, or "" when the node carries no such
// label. A value that is not a mode is an error naming it.
func Selected(labels map[string]string, key string) (string, error) {
	v, ok := labels[key]
	switch {
	case key == "" || !ok:
		return "", nil
	case v == ModeDevicePlugin || v == ModeDRA:
		return v, nil
	default:
		return "", fmt.Errorf("node label %s=%q: not a mode (%s or %s)", key, v, ModeDevicePlugin, ModeDRA)
	}
}

// Remembered keeps the last mode a node's label selected, in the agent's state
// directory: an agent restarting while the API server cannot be read keeps the node's
// mode instead of falling back to the configured one.
type Remembered struct{ Path string }

// Load is the mode last remembered, or "" when none is.
func (m Remembered) Load() (string, error) {
	b, err := os.ReadFile(m.Path)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("the remembered mode: %w", err)
	}
	v := strings.TrimSpace(string(b))
	if v != ModeDevicePlugin && v != ModeDRA && v != "" {
		return "", fmt.Errorf("the remembered mode in %s: %q is not a mode", m.Path, v)
	}
	return v, nil
}

// Store remembers mode; "" forgets it (the node's label is gone).
func (m Remembered) Store(mode string) error {
	if mode == "" {
		if err := os.Remove(m.Path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("forgetting the remembered mode: %w", err)
		}
		return nil
	}
	if err := atomicfile.Write(m.Path, []byte(mode+"\n"), 0o644, 0o755); err != nil {
		return fmt.Errorf("remembering the mode in %s: %w", filepath.Dir(m.Path), err)
	}
	return nil
}
