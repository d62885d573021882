// SPDX-License-Identifier: Apache-2.0

// Package syncbuf is, for tests only, an output one goroutine (a logger, a child's
// copier) writes while the test reads it.
package syncbuf

import (
	"strings"
	"sync"
)

// Buffer is a strings.Builder safe for one writer and concurrent readers.
type Buffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.Write(p) // a strings.Builder never fails a write
	return len(p), nil
}

// String is what was written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Len is how many bytes were written so far.
func (s *Buffer) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Len()
}
