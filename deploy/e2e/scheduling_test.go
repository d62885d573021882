// SPDX-License-Identifier: Apache-2.0

//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/neureality-sdk/nr1-agent/nr1"
	"github.com/neureality-sdk/nr1-agent/nr1/manifest"
)

const schedNS = "nr1-sched"

// BenchmarkSchedulingLatency: CGs booking the ResNet-50 CG's compute DMA and queues,
// created 10 at a time (-benchtime=5x: 50 per mode), through the device plugin's
// extended resources and through DRA claims, in the same run; from each pod's creation
// to the scheduler binding it (its node set) and to its container running (the
// kubelet's admission, Allocate or the DRA claim's Prepare and CDI, the runtime's start).
// p50 and p99 over all pods of the mode.
func BenchmarkSchedulingLatency(b *testing.B) {
	c := client(b)
	imageMB := nr1LoadImageMB(b)
	booked := nr1.Amounts{3, 0, imageMB + 1, 7}
	for _, mode := range []string{"devicePlugin", "dra"} {
		b.Run("mode="+mode, func(b *testing.B) {
			if mode == "dra" {
				withConfig(b, c, func(cfg map[string]any) { cfg["mode"] = "dra" })
			}
			var toScheduled, toRunning []float64
			round := 0
			for b.Loop() {
				s, r := schedulingRound(b, c, mode == "dra", round, 10, booked)
				toScheduled, toRunning = append(toScheduled, s...), append(toRunning, r...)
				round++
			}
			slices.Sort(toScheduled)
			slices.Sort(toRunning)
			b.ReportMetric(percentile(toScheduled, 50), "scheduled-p50-ms")
			b.ReportMetric(percentile(toScheduled, 99), "scheduled-p99-ms")
			b.ReportMetric(percentile(toRunning, 50), "running-p50-ms")
			b.ReportMetric(percentile(toRunning, 99), "running-p99-ms")
			b.Logf("%s: %d pods; to scheduled ms %.0f; to running ms %.0f", mode, len(toScheduled), toScheduled, toRunning)
		})
	}
}

// schedulingRound creates n CGs at once and returns, per pod, the milliseconds from its
// creation to its binding and to its container running; then deletes them.
func schedulingRound(b *testing.B, c kubernetes.Interface, viaDRA bool, round, n int, booked nr1.Amounts) (toScheduled, toRunning []float64) {
	b.Helper()
	ns := fmt.Sprintf("%s-%d", schedNS, round)
	newNamespace(b, c, ns)
	defer deleteNamespace(b, c, ns)
	var template *string
	if viaDRA {
		template = createTemplate(b, c, manifest.ClaimTemplate(ns, "cg", booked))
	}
	watchPods := func() watch.Interface {
		w, err := c.CoreV1().Pods(ns).Watch(context.Background(), metav1.ListOptions{})
		if err != nil {
			b.Fatal(err)
		}
		return w
	}
	w := watchPods()
	defer func() { w.Stop() }()
	created, scheduled, running := map[string]time.Time{}, map[string]time.Time{}, map[string]time.Time{}
	for i := range n {
		pod := bookingCG(ns, fmt.Sprintf("cg-%02d", i), booked, booked, template)
		created[pod.Name] = time.Now()
		if _, err := c.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	deadline := time.After(3 * time.Minute)
	for len(running) < n {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				// The API server ends watches now and then; what a new one misses of a
				// pod, its next change or the list it starts with shows.
				w = watchPods()
				continue
			}
			p, isPod := ev.Object.(*corev1.Pod)
			if !isPod || ev.Type == watch.Deleted {
				continue
			}
			now := time.Now()
			if _, seen := scheduled[p.Name]; !seen && p.Spec.NodeName != "" {
				scheduled[p.Name] = now
			}
			if _, seen := running[p.Name]; !seen && allRunning(p) == nil {
				running[p.Name] = now
			}
		case <-deadline:
			b.Fatalf("round %d: %d of %d pods running after 3 minutes", round, len(running), n)
		}
	}
	for name, t0 := range created {
		toScheduled = append(toScheduled, float64(scheduled[name].Sub(t0).Microseconds())/1000)
		toRunning = append(toRunning, float64(running[name].Sub(t0).Microseconds())/1000)
	}
	return toScheduled, toRunning
}
