// SPDX-License-Identifier: Apache-2.0

package dra

import (
	"context"
	"errors"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
)

// ClaimRef names a claim of the NR1's driver that the kubelet lists in use by a
// container of the node.
type ClaimRef struct{ Namespace, Name string }

// ClaimReader reads a claim from the API server.
type ClaimReader interface {
	Claim(ctx context.Context, namespace, name string) (*resourceapi.ResourceClaim, error)
}

// Recover prepares again each claim the kubelet lists in use that the store does not
// hold, as after a checkpoint lost or set aside damaged: the kubelet does not prepare a
// running pod's claims again. Each is read from the API server, must be reserved for a
// pod and allocated this node's NR1, and is then prepared as NodePrepareResources
// would (its CDI spec written again, the same). It returns the claims recovered; those
// that could not be are in the error, and their CGs' allocations stay unknown.
func (d *Driver) Recover(ctx context.Context, api ClaimReader, refs []ClaimRef) ([]Claim, error) {
	var recovered []Claim
	var errs []error
	for _, ref := range refs {
		if d.store.Holds(ref.Namespace, ref.Name) {
			continue
		}
		c, err := d.recover(ctx, api, ref)
		if err != nil {
			errs = append(errs, fmt.Errorf("claim %s/%s: %w", ref.Namespace, ref.Name, err))
			continue
		}
		recovered = append(recovered, c)
	}
	return recovered, errors.Join(errs...)
}

func (d *Driver) recover(ctx context.Context, api ClaimReader, ref ClaimRef) (Claim, error) {
	ctx, cancel := context.WithTimeout(ctx, claimTimeout)
	defer cancel()
	rc, err := api.Claim(ctx, ref.Namespace, ref.Name)
	if err != nil {
		return Claim{}, err
	}
	// A claim in use cannot be replaced under its name while a pod holds it: one
	// reserved for none is not the one the kubelet listed.
	if len(rc.Status.ReservedFor) == 0 {
		return Claim{}, errors.New("reserved for no pod")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if c, ok := d.store.Get(rc.UID); ok {
		return c, nil
	}
	c, err := d.prepare(rc)
	if err != nil {
		return Claim{}, err
	}
	d.log.Info("DRA claim recovered", "namespace", c.Namespace, "claim", c.Name, "uid", c.UID, "amounts", c.Amounts().String())
	return c, nil
}
