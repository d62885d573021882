// SPDX-License-Identifier: Apache-2.0

package runtime

import "github.com/prometheus/client_golang/prometheus"

// ReconnectsCounter exports how often w reconnected to the runtime.
func (w *Watcher) ReconnectsCounter() prometheus.Collector {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "nr1_runtime_reconnects_total", Help: "Reconnections to the container runtime.",
	}, func() float64 { return float64(w.Reconnects()) })
}
