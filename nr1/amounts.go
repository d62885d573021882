package nr1

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Amounts holds a quantity of each resource, in the resource's units, indexed by Resource.
type Amounts [NumResources]int64

// Add returns a + b.
func (a Amounts) Add(b Amounts) Amounts {
	for i := range a {
		a[i] += b[i]
	}
	return a
}

// Max returns the larger of a and b per resource.
func (a Amounts) Max(b Amounts) Amounts {
	for i := range a {
		a[i] = max(a[i], b[i])
	}
	return a
}

// IsZero reports whether every amount is zero.
func (a Amounts) IsZero() bool { return a == Amounts{} }

// String formats the amounts as "compute_dma_memory=3 cpu_dma_memory=0 ...".
func (a Amounts) String() string {
	var b strings.Builder
	for i, r := range All {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%d", r.Short(), a[r])
	}
	return b.String()
}

// MarshalJSON writes the amounts as an object keyed by short name.
func (a Amounts) MarshalJSON() ([]byte, error) {
	b := []byte{'{'}
	for i, r := range All {
		if i > 0 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, "%q:%d", r.Short(), a[r])
	}
	return append(b, '}'), nil
}

// UnmarshalJSON reads an object keyed by short or full resource names.
func (a *Amounts) UnmarshalJSON(b []byte) error {
	var m map[string]int64
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("amounts: %w", err)
	}
	*a = Amounts{}
	for k, v := range m {
		r, err := ParseResource(k)
		if err != nil {
			return fmt.Errorf("amounts: %w", err)
		}
		a[r] = v
	}
	return nil
}
