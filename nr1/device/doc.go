// SPDX-License-Identifier: Apache-2.0

// Package device is the NR1 inventory: the capacity of each resource, the device files
// that carry it, and the NR1's health, read from the driver's sysfs attributes.
//
// NR1 inventory from a sysfs root: capacity per resource (sysfs attribute → statfs of
// the image partition → config; an attribute is read up to a page and parsed by
// `parseCapacity`, health by `parseHealth`, the content quoted in the reason); the
// device files resolved once at startup (`Resolve`: each configured host path found
// under `--path.dev`, the host's /dev as mounted in the agent's container, with its
// kernel identity; missing or duplicate files refused) and handed to the device plugin,
// the footprint targets and the throttle; health (attribute + each file still the one
// resolved), `Monitor` re-probing health and waking watchers.
package device
