// SPDX-License-Identifier: Apache-2.0

package config

import (
	"testing"
	"time"
)

// The stages that keep the samples' pace follow the sampling interval, whatever it is.
func TestPacesFollowTheSamplingInterval(t *testing.T) {
	for _, d := range []time.Duration{100 * time.Millisecond, time.Second, 7 * time.Second} {
		p := Sampling{Interval: Duration{Duration: d}, IdleInterval: Duration{Duration: time.Minute}}.Paces()
		if p.RuntimePoll != d || p.AllocationRead != d || p.ScanTimeout != d {
			t.Errorf("interval %s: paces %+v", d, p)
		}
	}
}
