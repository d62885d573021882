// SPDX-License-Identifier: Apache-2.0

package dra

import (
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"

	"github.com/neureality-sdk/nr1-agent/nr1"
	"github.com/neureality-sdk/nr1-agent/nr1/manifest"
)

// DriverName is the DRA driver's name, which the DeviceClass selects.
const DriverName = nr1.DRADriver

// DeviceName names the NR1 in the node's pool.
const DeviceName = "nr1-0"

// Device is the NR1 as the ResourceSlice publishes it: shareable by any number of
// claims, each consuming what it requests of each capacity and nothing of one it does
// not name (the request policy's default is 0, where the API's default is the whole
// capacity), in steps of one unit. An unhealthy NR1 carries a NoSchedule taint.
func Device(capacity nr1.Amounts, attributes map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, healthy bool, reason string) resourceapi.Device {
	d := resourceapi.Device{
		Name:                     DeviceName,
		AllowMultipleAllocations: ptr.To(true),
		Attributes:               attributes,
		Capacity:                 make(map[resourceapi.QualifiedName]resourceapi.DeviceCapacity, nr1.NumResources),
	}
	for _, r := range nr1.All {
		zero, step := manifest.Quantity(r, 0), manifest.Quantity(r, 1)
		d.Capacity[manifest.CapacityName(r)] = resourceapi.DeviceCapacity{
			Value: manifest.Quantity(r, capacity[r]),
			RequestPolicy: &resourceapi.CapacityRequestPolicy{
				Default:    &zero,
				ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: &zero, Step: &step},
			},
		}
	}
	if !healthy {
		d.Taints = []resourceapi.DeviceTaint{{Key: DriverName + "/unhealthy", Value: "true", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
		if reason != "" {
			d.Attributes = withAttribute(d.Attributes, "unhealthyReason", reason)
		}
	}
	return d
}

func withAttribute(in map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, name resourceapi.QualifiedName, value string) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	out := make(map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, len(in)+1)
	for k, v := range in {
		out[k] = v
	}
	if len(value) > resourceapi.DeviceAttributeMaxValueLength {
		value = value[:resourceapi.DeviceAttributeMaxValueLength]
	}
	out[name] = resourceapi.DeviceAttribute{StringValue: &value}
	return out
}
