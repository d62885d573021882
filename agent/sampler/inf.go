package sampler

import (
	"math"
	"strconv"

	"github.com/neureality-sdk/nr1-agent/nr1"
)

var posInf = math.Inf(1)

// Fraction is usage over allocation; +Inf is usage over a zero allocation.
type Fraction float64

// MarshalJSON writes "+Inf" for usage over a zero allocation: JSON has no infinity.
func (f Fraction) MarshalJSON() ([]byte, error) {
	if math.IsInf(float64(f), 1) {
		return []byte(`"+Inf"`), nil
	}
	return strconv.AppendFloat(nil, float64(f), 'g', 6, 64), nil
}

// Ratio is usage over allocation, per resource.
type Ratio = nr1.PerResource[Fraction]
