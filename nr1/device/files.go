// SPDX-License-Identifier: Apache-2.0

package device

import (
	"fmt"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/neureality-sdk/nr1-agent/nr1"
)

// Identity is what a file is to the kernel: a character device by its device number, a
// regular file by its filesystem and inode (user-space encodings, as stat gives them).
type Identity struct {
	Char bool
	Rdev uint64
	Dev  uint64
	Ino  uint64
}

// Identify stats path: the one place an NR1 file's identity is read.
func Identify(path string) (Identity, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return Identity{}, fmt.Errorf("stat %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFCHR {
		return Identity{Char: true, Rdev: st.Rdev}, nil
	}
	return Identity{Dev: st.Dev, Ino: st.Ino}, nil
}

// ResolvedFile is one configured NR1 file as found when the agent started. The device
// plugin, the footprint targets and the throttle all take their files from here, so they
// agree on what an NR1 file is.
type ResolvedFile struct {
	File
	Resource nr1.Resource
	// Local is where the agent reaches the file: under --path.dev for a file in the
	// host's /dev. File.Path stays the host's path, which the kubelet gives containers.
	Local string
	Identity
}

// Local is where the agent reaches the host file path: a file of the host's /dev is
// under devRoot (where the host's /dev is mounted in the agent's container); any other
// path is the host's own.
func Local(devRoot, path string) string {
	if rest, ok := strings.CutPrefix(path, "/dev/"); ok && devRoot != "" && devRoot != "/dev" {
		return filepath.Join(devRoot, rest)
	}
	return path
}

// Resolve finds every configured file and remembers what it is: a file that does not
// exist is an error (the agent must know what it advertises, measures and throttles),
// and so is one file configured twice.
func (inv *Inventory) Resolve() ([]ResolvedFile, error) {
	var out []ResolvedFile
	seen := map[Identity]string{}
	for _, r := range nr1.All {
		for i, f := range inv.cfg.Resources[r].Files {
			df := ResolvedFile{File: f, Resource: r, Local: Local(inv.devRoot, f.Path)}
			id, err := Identify(df.Local)
			if err != nil {
				return nil, fmt.Errorf("nr1.resources.%s.files[%d] %s: %w", r.Short(), i, f.Path, err)
			}
			if other, dup := seen[id]; dup {
				return nil, fmt.Errorf("nr1.resources.%s.files[%d] %s: the same file as %s", r.Short(), i, f.Path, other)
			}
			seen[id] = f.Path
			df.Identity = id
			out = append(out, df)
		}
	}
	inv.resolved = out
	return out, nil
}
