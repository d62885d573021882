// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Holding is what the workload holds at one time.
type Holding struct {
	ComputeDMAMB int64 `json:"computeDmaMB"`
	CPUDMAMB     int64 `json:"cpuDmaMB"`
	Queues       int64 `json:"queues"`
	WriteMB      int64 `json:"writeMB"`
}

// Step changes the holding at an offset from the start.
type Step struct {
	At  time.Duration
	Set map[string]int64 // keys: compute, cpu, queues, write
}

var stepKeys = map[string]func(*Holding) *int64{
	"compute": func(h *Holding) *int64 { return &h.ComputeDMAMB },
	"cpu":     func(h *Holding) *int64 { return &h.CPUDMAMB },
	"queues":  func(h *Holding) *int64 { return &h.Queues },
	"write":   func(h *Holding) *int64 { return &h.WriteMB },
}

// ParseStep reads "DURATION:key=value,key=value", e.g. "10s:compute=6,queues=9".
func ParseStep(s string) (Step, error) {
	at, rest, ok := strings.Cut(s, ":")
	if !ok {
		return Step{}, fmt.Errorf("step %q: want DURATION:key=value[,key=value]", s)
	}
	d, err := time.ParseDuration(at)
	if err != nil || d < 0 {
		return Step{}, fmt.Errorf("step %q: %q is not a non-negative duration", s, at)
	}
	step := Step{At: d, Set: map[string]int64{}}
	for _, kv := range strings.Split(rest, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if _, known := stepKeys[k]; !ok || !known {
			return Step{}, fmt.Errorf("step %q: %q is not one of compute=, cpu=, queues=, write=", s, kv)
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return Step{}, fmt.Errorf("step %q: %s wants a non-negative integer, got %q", s, k, v)
		}
		step.Set[k] = n
	}
	return step, nil
}

// Apply returns h changed by the step.
func (s Step) Apply(h Holding) Holding {
	for k, v := range s.Set {
		*stepKeys[k](&h) = v
	}
	return h
}

// SortSteps orders steps by time, keeping the given order for equal times.
func SortSteps(steps []Step) {
	sort.SliceStable(steps, func(i, j int) bool { return steps[i].At < steps[j].At })
}
