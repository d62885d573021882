// SPDX-License-Identifier: Apache-2.0

package untrusted

import (
	"errors"
	"fmt"
	"strconv"
)

// MaxUIDLen bounds a pod UID: a UUID is 36 characters, the kubelet's config hash of a
// static pod 32; 64 leaves room for a longer hash without admitting anything else.
const MaxUIDLen = 64

// PodUID checks that uid is a pod UID: a UUID (8-4-4-4-12 hexadecimal digits), which the
// API server gives every pod, or a string of hexadecimal digits, which the kubelet gives a
// static pod (its config hash). Either is one path component that is neither "." nor
// "..", so joining it to a directory names an entry of that directory.
func PodUID(uid string) error {
	switch {
	case uid == "":
		return errors.New("empty pod UID")
	case len(uid) > MaxUIDLen:
		return fmt.Errorf("pod UID %s: longer than %d bytes", Quote(uid), MaxUIDLen)
	case isUUID(uid) || isHex(uid):
		return nil
	}
	return fmt.Errorf("pod UID %s: neither a UUID nor a hexadecimal config hash", Quote(uid))
}

func isHex(s string) bool {
	for i := range len(s) {
		if !hexDigit(s[i]) {
			return false
		}
	}
	return true
}

func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := range len(s) {
		switch i {
		case 8, 13, 18, 23:
			if s[i] != '-' {
				return false
			}
		default:
			if !hexDigit(s[i]) {
				return false
			}
		}
	}
	return true
}

func hexDigit(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// MaxQuoted bounds how much of a string Quote shows.
const MaxQuoted = 128

// Quote returns s as a Go string literal, every byte that is not printable escaped, with
// at most MaxQuoted bytes of s shown and the rest counted: an error or a log line naming
// a value from outside stays one line of bounded length whatever the value holds.
func Quote(s string) string {
	if len(s) <= MaxQuoted {
		return strconv.Quote(s)
	}
	return fmt.Sprintf("%s… (%d bytes)", strconv.Quote(s[:MaxQuoted]), len(s))
}
