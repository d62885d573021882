// SPDX-License-Identifier: Apache-2.0

package manifest

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/neureality-sdk/nr1-agent/nr1"
)

// capacityNames are the NR1 device's capacities, one per NR1 resource.
var capacityNames = nr1.PerResource[resourceapi.QualifiedName]{"computeDMA", "cpuDMA", "dockerPartition", "hvQueues"}

// CapacityName is the device capacity that stands for r.
func CapacityName(r nr1.Resource) resourceapi.QualifiedName { return capacityNames[r] }

// Quantity is n units of r as a capacity: MB resources in bytes (Mi), queues counted.
func Quantity(r nr1.Resource, n nr1.Units) resource.Quantity {
	if r.UnitBytes() > 1 {
		return *resource.NewQuantity(int64(n)*r.UnitBytes(), resource.BinarySI)
	}
	return *resource.NewQuantity(int64(n), resource.DecimalSI)
}

// DeviceClassName is the NR1's DeviceClass (deploy/kustomize/components/dra).
const DeviceClassName = "nr1.neureality.ai"

// RequestName is the name of the one request of an NR1 claim, which a pod's containers
// name in resources.claims through the pod's claim.
const RequestName = "nr1"

// ClaimTemplate is the ResourceClaimTemplate of a CG that needs a of the NR1 (what the
// toolchain writes to resources.yaml): one request on the NR1's DeviceClass for those
// amounts of its capacities. A resource the CG needs none of is left out: it consumes
// the request policy's default, zero.
func ClaimTemplate(namespace, name string, a nr1.Amounts) *resourceapi.ResourceClaimTemplate {
	requests := map[resourceapi.QualifiedName]resource.Quantity{}
	for _, r := range nr1.All {
		if a[r] > 0 {
			requests[capacityNames[r]] = Quantity(r, a[r])
		}
	}
	return &resourceapi.ResourceClaimTemplate{
		TypeMeta:   metav1.TypeMeta{APIVersion: resourceapi.SchemeGroupVersion.String(), Kind: "ResourceClaimTemplate"},
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: RequestName, Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: DeviceClassName,
				Capacity:        &resourceapi.CapacityRequirements{Requests: requests},
			}}},
		}}},
	}
}

// Amounts converts what an allocation consumed of the NR1 to units, the inverse of a
// claim template's requests. A capacity it does not name was consumed at zero; one the
// NR1 does not have, a negative or fractional amount is refused: what the CG may use
// would not be known.
func Amounts(consumed map[resourceapi.QualifiedName]resource.Quantity) (nr1.Amounts, error) {
	var a nr1.Amounts
	for name, q := range consumed {
		r, ok := resourceOf(name)
		if !ok {
			return nr1.Amounts{}, fmt.Errorf("consumed capacity %q is none of the NR1's", name)
		}
		v, exact := q.AsInt64()
		if !exact || v < 0 || v%r.UnitBytes() != 0 {
			return nr1.Amounts{}, fmt.Errorf("consumed capacity %s=%s is not a whole number of %s", name, q.String(), r.Unit())
		}
		a[r] = nr1.Units(v / r.UnitBytes())
	}
	return a, nil
}

// resourceOf reads a capacity's name, unqualified (the driver's own domain) or
// qualified with it.
func resourceOf(name resourceapi.QualifiedName) (nr1.Resource, bool) {
	for _, r := range nr1.All {
		if name == capacityNames[r] || string(name) == nr1.DRADriver+"/"+string(capacityNames[r]) {
			return r, true
		}
	}
	return 0, false
}
