package sampler

import (
	"fmt"
	"math"
	"strconv"

	"github.com/neureality-sdk/nr1-agent/nr1"
)

var posInf = math.Inf(1)

// Ratio is usage over allocation, per resource.
type Ratio [nr1.NumResources]float64

// MarshalJSON writes an object keyed by short name, with "+Inf" for usage over a zero
// allocation (JSON has no infinity).
func (r Ratio) MarshalJSON() ([]byte, error) {
	b := []byte{'{'}
	for i, res := range nr1.All {
		if i > 0 {
			b = append(b, ',')
		}
		v := strconv.FormatFloat(r[res], 'g', 6, 64)
		if math.IsInf(r[res], 1) {
			v = `"+Inf"`
		}
		b = fmt.Appendf(b, "%q:%s", res.Short(), v)
	}
	return append(b, '}'), nil
}
