// SPDX-License-Identifier: Apache-2.0

package allocation

import (
	"errors"
	"fmt"

	"github.com/neureality-sdk/nr1-agent/nr1"
)

// FromAnnotations reads the Allocate annotations of a container (CRI status
// annotations). found is false when the container carries none. A value is what the
// device plugin writes, decimal digits, and no more than the resource's base unit can
// count (nr1.Resource.ParseUnits): anything else is an error naming the annotation, and
// none of the container's annotations is taken then.
func FromAnnotations(annotations map[string]string) (a nr1.Amounts, found bool, err error) {
	var errs []error
	for _, r := range nr1.All {
		v, ok := annotations[r.Annotation()]
		if !ok {
			continue
		}
		found = true
		n, perr := r.ParseUnits(v)
		if perr != nil {
			errs = append(errs, fmt.Errorf("annotation %s: %w", r.Annotation(), perr))
			continue
		}
		a[r] = n
	}
	if len(errs) > 0 {
		return nr1.Amounts{}, found, errors.Join(errs...)
	}
	return a, found, nil
}
