// SPDX-License-Identifier: Apache-2.0

// Package untrusted checks and quotes strings the agent did not write: names and values
// from the runtime, the kubelet, the API server, sysfs and bpffs. A CG written to get more
// than it was given controls some of them, so none becomes part of a path, or the whole
// of a log line, before it has been through here.
//
// Strings from outside the agent: `PodUID` (a UUID or a hexadecimal config hash, at most
// 64 bytes: one path component, never `.` or `..`), `Quote` (a Go literal of at most 128
// bytes of the value, the rest counted), for errors and logs naming what was refused.
package untrusted
