// SPDX-License-Identifier: Apache-2.0

package footprint

import "os"

// pageShift converts vm_pgoff (pages) to the byte offset /proc/PID/maps shows.
var pageShift = func() uint {
	n := uint(0)
	for p := os.Getpagesize(); p > 1; p >>= 1 {
		n++
	}
	return n
}()
