// SPDX-License-Identifier: Apache-2.0

// Package checkpoint frames the files in which the agent keeps what must outlive it (the
// enforcement state, the prepared DRA claims): a version, so that an agent never reads
// another version's meaning into it, and a checksum, so that a damaged file is told
// apart from a file saying something. Each file is written whole (internal/atomicfile).
package checkpoint

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/neureality-sdk/nr1-agent/internal/atomicfile"
)

// ErrDamaged marks a file that is not a checkpoint this agent can trust: not the frame,
// a checksum that does not match, a state that does not decode.
var ErrDamaged = errors.New("damaged checkpoint")

// ErrVersion marks a checkpoint of another version.
var ErrVersion = errors.New("checkpoint of another version")

type frame struct {
	Version  int             `json:"version"`
	Checksum string          `json:"checksum"` // sha256 of State, hexadecimal
	State    json.RawMessage `json:"state"`
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// Encode frames state as version.
func Encode(version int, state any) ([]byte, error) {
	body, err := json.Marshal(state)
	if err != nil {
		return nil, fmt.Errorf("encoding the state: %w", err)
	}
	b, err := json.Marshal(frame{Version: version, Checksum: sum(body), State: body})
	if err != nil {
		return nil, fmt.Errorf("framing the state: %w", err)
	}
	return b, nil
}

// Decode reads a framed checkpoint of version into state. The error wraps ErrDamaged or
// ErrVersion; on an error, state may hold part of what was read.
func Decode(b []byte, version int, state any) error {
	var f frame
	if err := json.Unmarshal(b, &f); err != nil {
		return fmt.Errorf("%w: %w", ErrDamaged, err)
	}
	if f.Version == 0 || f.Checksum == "" || f.State == nil {
		return fmt.Errorf("%w: no version, checksum or state", ErrDamaged)
	}
	if f.Version != version {
		return fmt.Errorf("%w: version %d, this agent reads %d", ErrVersion, f.Version, version)
	}
	if sum(f.State) != f.Checksum {
		return fmt.Errorf("%w: checksum mismatch", ErrDamaged)
	}
	if err := json.Unmarshal(f.State, state); err != nil {
		return fmt.Errorf("%w: %w", ErrDamaged, err)
	}
	return nil
}

// Write frames state as version and replaces path with it whole.
func Write(path string, version int, state any, perm, dirPerm os.FileMode) error {
	b, err := Encode(version, state)
	if err != nil {
		return fmt.Errorf("checkpoint %s: %w", path, err)
	}
	return atomicfile.Write(path, b, perm, dirPerm)
}

// SetAside renames a checkpoint that cannot be read to path.damaged, where it stays for
// whoever wants to see what it was, and the next write starts a new one.
func SetAside(path string) (string, error) {
	aside := path + ".damaged"
	if err := os.Rename(path, aside); err != nil {
		return "", fmt.Errorf("setting the checkpoint %s aside: %w", path, err)
	}
	return aside, nil
}
