// SPDX-License-Identifier: Apache-2.0

package latest

import (
	"errors"
	"sync"
	"testing"
	"time"
)

func TestPublishWakesEveryWaiterOnce(t *testing.T) {
	v := New(0)
	got, changed := v.Load()
	if got != 0 {
		t.Fatalf("initial %d", got)
	}
	var wg sync.WaitGroup
	seen := make([]int, 3)
	for i := range seen {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-changed
			seen[i], _ = v.Load()
		}()
	}
	at := time.Unix(100, 0)
	v.Publish(at, 7)
	wg.Wait()
	for i, s := range seen {
		if s != 7 {
			t.Errorf("waiter %d saw %d", i, s)
		}
	}
	_, next := v.Load()
	select {
	case <-next:
		t.Fatal("the next channel is closed before anything new is published")
	default:
	}
	if ok, err := v.Health(); !ok.Equal(at) || err != nil {
		t.Errorf("health %v %v", ok, err)
	}
}

func TestFailureKeepsTheValueAndIsCleared(t *testing.T) {
	v := New("")
	if ok, err := v.Health(); !ok.IsZero() || err != nil {
		t.Fatalf("before anything: %v %v", ok, err)
	}
	v.Publish(time.Unix(1, 0), "a")
	_, changed := v.Load()
	v.Fail(errors.New("runtime gone"))
	if s, _ := v.Load(); s != "a" {
		t.Errorf("value after a failure %q", s)
	}
	select {
	case <-changed:
		t.Error("a failure woke the waiters")
	default:
	}
	if ok, err := v.Health(); !ok.Equal(time.Unix(1, 0)) || err == nil {
		t.Errorf("health after a failure: %v %v", ok, err)
	}
	v.Succeeded(time.Unix(2, 0))
	if ok, err := v.Health(); !ok.Equal(time.Unix(2, 0)) || err != nil {
		t.Errorf("health after a success: %v %v", ok, err)
	}
}

// A renewed value is read with its new time, and wakes no one.
func TestRenewDoesNotWake(t *testing.T) {
	v := New(1)
	_, changed := v.Load()
	v.Renew(time.Unix(5, 0), 2)
	select {
	case <-changed:
		t.Fatal("a renewal woke the waiters")
	default:
	}
	if got, _ := v.Load(); got != 2 {
		t.Errorf("value %d after renewal", got)
	}
	if ok, err := v.Health(); !ok.Equal(time.Unix(5, 0)) || err != nil {
		t.Errorf("health after renewal: %v %v", ok, err)
	}
}

// A view reads what its value publishes, and the value's health.
func TestViewFollowsItsValue(t *testing.T) {
	v := New(1)
	view := v.View()
	_, changed := view.Load()
	v.Publish(time.Unix(5, 0), 2)
	<-changed
	if got, _ := view.Load(); got != 2 {
		t.Errorf("view reads %d, want 2", got)
	}
	v.Fail(errors.New("gone"))
	if ok, err := view.Health(); !ok.Equal(time.Unix(5, 0)) || err == nil {
		t.Errorf("view's health %v %v", ok, err)
	}
}
