// SPDX-License-Identifier: Apache-2.0

//go:build !amd64 && !arm64

package bpf

// compatSyscalls is empty where the agent is not built: no 32-bit open is linked there.
var compatSyscalls = map[string]int64{}

// openSyscalls is empty where the agent is not built: the gate links by the opens'
// entry tracepoints there.
var openSyscalls = map[string]int64{}
