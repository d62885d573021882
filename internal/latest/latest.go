// SPDX-License-Identifier: Apache-2.0

package latest

import (
	"sync"
	"time"
)

// Value is a stage's latest value. The zero Value is not usable; use New.
type Value[T any] struct {
	mu      sync.Mutex
	v       T
	changed chan struct{}
	ok      time.Time // when the stage last succeeded
	err     error     // why its last attempt failed; nil when it succeeded
}

// New returns a Value holding initial, with no success recorded yet.
func New[T any](initial T) *Value[T] {
	return &Value[T]{v: initial, changed: make(chan struct{})}
}

// Load returns the value and a channel closed when the next one is published.
func (l *Value[T]) Load() (T, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.v, l.changed
}

// Renew records a success at that produced v without waking the waiters: for a new
// reading equal to the last in all a waiter acts on, whose time still matters (a reader
// judges its age).
func (l *Value[T]) Renew(at time.Time, v T) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.v, l.ok, l.err = v, at, nil
}

// Publish records a success at that produced v, and wakes the waiters.
func (l *Value[T]) Publish(at time.Time, v T) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.v, l.ok, l.err = v, at, nil
	close(l.changed)
	l.changed = make(chan struct{})
}

// PublishFailing publishes v, waking the waiters, while the stage is failing for err:
// a view kept and marked stale, say.
func (l *Value[T]) PublishFailing(v T, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.v, l.err = v, err
	close(l.changed)
	l.changed = make(chan struct{})
}

// Succeeded records a success at that changed nothing: nobody is woken.
func (l *Value[T]) Succeeded(at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ok, l.err = at, nil
}

// Fail records a failed attempt; the last value stays, and ages.
func (l *Value[T]) Fail(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.err = err
}

// Health returns when the stage last succeeded (zero before its first success) and
// why its last attempt failed (nil when it succeeded).
func (l *Value[T]) Health() (lastSuccess time.Time, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ok, l.err
}

// View reads a Value and its health, and cannot change them: what a stage hands its
// readers, so that only the stage publishes.
type View[T any] struct{ v *Value[T] }

// View returns the read side of l.
func (l *Value[T]) View() View[T] { return View[T]{l} }

// Load returns the latest value and a channel closed when the next is published.
func (v View[T]) Load() (T, <-chan struct{}) { return v.v.Load() }

// Health returns when the stage last succeeded and why its last attempt failed.
func (v View[T]) Health() (lastSuccess time.Time, err error) { return v.v.Health() }
