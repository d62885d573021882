// SPDX-License-Identifier: Apache-2.0

package deviceplugin

// Device IDs are the unit's index in base 62, shortest form first. The kubelet reads a
// ListAndWatch answer with gRPC's default 4 MiB limit and, above it, silently drops the
// resource's allocatable to zero; with 13 bytes of framing and health per device, short
// IDs are what keeps 116244 devices far under it (three characters up to 238327 units).
const idAlphabet = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"

const idBase = int64(len(idAlphabet))

var idDigit = func() (d [256]int8) {
	for i := range d {
		d[i] = -1
	}
	for i := 0; i < len(idAlphabet); i++ {
		d[idAlphabet[i]] = int8(i)
	}
	return d
}()

// appendID appends the ID of unit i to buf.
func appendID(buf []byte, i int64) []byte {
	var tmp [11]byte
	n := len(tmp)
	for {
		n--
		tmp[n] = idAlphabet[i%idBase]
		i /= idBase
		if i == 0 {
			break
		}
	}
	return append(buf, tmp[n:]...)
}

// idIndex returns the unit an ID names, and false for anything that is not the canonical
// ID of a unit below capacity.
func idIndex(id string, capacity int64) (int64, bool) {
	if id == "" || len(id) > 10 || (len(id) > 1 && id[0] == '0') {
		return 0, false
	}
	var n int64
	for i := 0; i < len(id); i++ {
		d := idDigit[id[i]]
		if d < 0 {
			return 0, false
		}
		n = n*idBase + int64(d)
	}
	return n, n < capacity
}
