// SPDX-License-Identifier: Apache-2.0

package footprint

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// mapsLine is what the footprint needs of one /proc/PID/maps line.
type mapsLine struct {
	start, end, offset uint64
	major, minor       uint32
	ino                uint64
}

// parseMapsLine reads "start-end perms offset major:minor inode [path]". Numbers are
// hex except the inode.
func parseMapsLine(line []byte) (mapsLine, error) {
	var m mapsLine
	fields := bytes.Fields(line)
	if len(fields) < 5 {
		return m, fmt.Errorf("maps line %q: want at least 5 fields", line)
	}
	lo, hi, ok := bytes.Cut(fields[0], []byte("-"))
	if !ok {
		return m, fmt.Errorf("maps line %q: bad range", line)
	}
	var err error
	if m.start, err = strconv.ParseUint(string(lo), 16, 64); err != nil {
		return m, fmt.Errorf("maps line %q: bad start", line)
	}
	if m.end, err = strconv.ParseUint(string(hi), 16, 64); err != nil || m.end < m.start {
		return m, fmt.Errorf("maps line %q: bad end", line)
	}
	if m.offset, err = strconv.ParseUint(string(fields[2]), 16, 64); err != nil {
		return m, fmt.Errorf("maps line %q: bad offset", line)
	}
	maj, mnr, ok := bytes.Cut(fields[3], []byte(":"))
	if !ok {
		return m, fmt.Errorf("maps line %q: bad device", line)
	}
	ma, err1 := strconv.ParseUint(string(maj), 16, 32)
	mi, err2 := strconv.ParseUint(string(mnr), 16, 32)
	if err1 != nil || err2 != nil {
		return m, fmt.Errorf("maps line %q: bad device", line)
	}
	m.major, m.minor = uint32(ma), uint32(mi)
	if m.ino, err = strconv.ParseUint(string(fields[4]), 10, 64); err != nil {
		return m, fmt.Errorf("maps line %q: bad inode", line)
	}
	return m, nil
}

// fdinfoValue reads key from /proc/PID/fdinfo/FD content in the kernel's
// drm-usage-stats "key: value [unit]" format, with KiB, MiB and GiB scaled to bytes.
func fdinfoValue(content []byte, key string) (int64, bool, error) {
	for _, line := range bytes.Split(content, []byte("\n")) {
		k, v, ok := bytes.Cut(line, []byte(":"))
		if !ok || string(bytes.TrimSpace(k)) != key {
			continue
		}
		f := strings.Fields(string(v))
		if len(f) == 0 || len(f) > 2 {
			return 0, true, fmt.Errorf("fdinfo %s: want \"value [unit]\", got %q", key, strings.TrimSpace(string(v)))
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || n < 0 {
			return 0, true, fmt.Errorf("fdinfo %s: want a non-negative integer, got %q", key, f[0])
		}
		if len(f) == 2 {
			scale, ok := map[string]int64{"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[f[1]]
			if !ok {
				return 0, true, fmt.Errorf("fdinfo %s: unknown unit %q", key, f[1])
			}
			if n > (1<<63-1)/scale {
				return 0, true, fmt.Errorf("fdinfo %s: %d %s overflows", key, n, f[1])
			}
			n *= scale
		}
		return n, true, nil
	}
	return 0, false, nil
}

// fdinfoFlags reads the open flags (octal, as the kernel writes them) from
// /proc/PID/fdinfo/FD content.
func fdinfoFlags(content []byte) (uint64, error) {
	for _, line := range bytes.Split(content, []byte("\n")) {
		k, v, ok := bytes.Cut(line, []byte(":"))
		if !ok || string(bytes.TrimSpace(k)) != "flags" {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(string(v)), 8, 64)
		if err != nil {
			return 0, fmt.Errorf("fdinfo flags: want an octal number, got %q", strings.TrimSpace(string(v)))
		}
		return n, nil
	}
	return 0, fmt.Errorf("fdinfo: no flags line")
}
