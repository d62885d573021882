// SPDX-License-Identifier: Apache-2.0

package nr1

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/neureality-sdk/nr1-agent/internal/untrusted"
)

// PerResource holds one value per resource, indexed by Resource. In JSON, and so in the
// configuration and the checkpoint, it is an object keyed by the resources' short names.
type PerResource[T any] [NumResources]T

// Units is a quantity in a resource's own unit, what Kubernetes books: MB (2^20 bytes)
// of memory or partition, or queues.
type Units int64

// Base is a quantity in a resource's base unit, what is measured: bytes of memory or
// partition, or queue handles.
type Base int64

// Amounts holds a quantity of each resource in its units: capacities and allocations.
type Amounts = PerResource[Units]

// Usage holds a quantity of each resource in its base unit: what CGs hold.
type Usage = PerResource[Base]

// Number is what per-resource arithmetic works on.
type Number interface {
	~int | ~int64 | ~float64
}

// Add returns a + b, resource by resource.
func Add[T Number](a, b PerResource[T]) PerResource[T] {
	for i := range a {
		a[i] += b[i]
	}
	return a
}

// Max returns the larger of a and b, resource by resource.
func Max[T Number](a, b PerResource[T]) PerResource[T] {
	for i := range a {
		a[i] = max(a[i], b[i])
	}
	return a
}

// String writes "short=value" pairs in resource order.
func (p PerResource[T]) String() string {
	var b strings.Builder
	for i, r := range All {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%v", r.Short(), p[r])
	}
	return b.String()
}

// MarshalJSON writes an object keyed by short name, in resource order.
func (p PerResource[T]) MarshalJSON() ([]byte, error) {
	b := []byte{'{'}
	for i, r := range All {
		if i > 0 {
			b = append(b, ',')
		}
		v, err := json.Marshal(p[r])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", r.Short(), err)
		}
		b = fmt.Appendf(b, "%q:", r.Short())
		b = append(b, v...)
	}
	return append(b, '}'), nil
}

// UnmarshalJSON decodes each key present over the value already held, so that a
// configuration file overrides only what it names; an unknown resource or an unknown
// field inside a value is an error naming it.
func (p *PerResource[T]) UnmarshalJSON(b []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("want an object keyed by resource: %w", err)
	}
	for k, v := range m {
		r, err := ParseResource(k)
		if err != nil || r.Short() != k {
			return fmt.Errorf("unknown NR1 resource %q (want a short name: %s)", k, strings.Join(shortNames(), ", "))
		}
		d := json.NewDecoder(bytes.NewReader(v))
		d.DisallowUnknownFields()
		if err := d.Decode(&p[r]); err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
	}
	return nil
}

// InBase is u in r's base unit.
func (r Resource) InBase(u Units) Base { return Base(int64(u) * r.UnitBytes()) }

// MaxUnits is the largest amount of r whose base amount fits in a Base.
func (r Resource) MaxUnits() Units { return Units(math.MaxInt64 / r.UnitBytes()) }

// ParseUnits reads an amount of r read from outside the agent (an Allocate annotation, a
// sysfs attribute): decimal digits only, as the device plugin and a driver write them,
// and at most MaxUnits, so that no arithmetic in base units overflows.
func (r Resource) ParseUnits(s string) (Units, error) {
	if s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return 0, fmt.Errorf("want decimal digits, got %s", untrusted.Quote(s))
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || Units(n) > r.MaxUnits() {
		return 0, fmt.Errorf("want at most %d, got %s", r.MaxUnits(), untrusted.Quote(s))
	}
	return Units(n), nil
}

// InUnits is b in r's units, fractions kept.
func (r Resource) InUnits(b Base) float64 { return float64(b) / float64(r.UnitBytes()) }

func shortNames() []string {
	out := make([]string, 0, NumResources)
	for _, r := range All {
		out = append(out, r.Short())
	}
	return out
}
