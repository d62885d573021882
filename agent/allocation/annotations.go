package allocation

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/neureality-sdk/nr1-agent/nr1"
)

// FromAnnotations reads the Allocate annotations of a container (CRI status
// annotations). found is false when the container carries none.
func FromAnnotations(annotations map[string]string) (a nr1.Amounts, found bool, err error) {
	var errs []error
	for _, r := range nr1.All {
		v, ok := annotations[r.Annotation()]
		if !ok {
			continue
		}
		found = true
		n, perr := strconv.ParseInt(v, 10, 64)
		if perr != nil || n < 0 {
			errs = append(errs, fmt.Errorf("annotation %s: want a non-negative integer, got %q", r.Annotation(), v))
			continue
		}
		a[r] = nr1.Units(n)
	}
	return a, found, errors.Join(errs...)
}
