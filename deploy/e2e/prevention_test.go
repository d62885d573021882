// SPDX-License-Identifier: Apache-2.0

//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/neureality-sdk/nr1-agent/agent/offer/nodelabels"
	"github.com/neureality-sdk/nr1-agent/nr1"
	"github.com/neureality-sdk/nr1-agent/nr1/manifest"
)

// TestPrevention turns the budget gate on, in each mode: a CG that tries to hold more
// queues than it booked has the opens past its booking refused by the kernel (EDQUOT),
// is told so in an Event and counted, and no ladder acts on it, since it never held
// more; a CG within its booking, a CG whose pool of short-lived workers opens at its
// booking (a minute of it, through the agent's restart) and the host's own processes
// are never refused; the gate keeps refusing through an agent restart; turned off, the
// gate is removed. A 32-bit CG (nr1-load32, its opens through the kernel's compat
// entries) is held to its booking, and its worker pool never refused, alike.
func TestPrevention(t *testing.T) {
	c := client(t)
	t.Cleanup(func() {
		eventually(t, 60*time.Second, "the gate removed by an agent with prevention off", func() error {
			if _, err := os.Stat("/sys/fs/bpf/nr1-agent/gate"); !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("/sys/fs/bpf/nr1-agent/gate still there (%w)", err)
			}
			return nil
		})
	})
	resnet := nr1.Amounts{3, 0, 2392, 7}
	for _, mode := range []string{"devicePlugin", "dra"} {
		t.Run(mode, func(t *testing.T) {
			cg := func(name string, bits32 bool, args ...string) *corev1.Pod {
				p := loadPod(name, args...)
				if bits32 {
					p.Spec.Containers[0].Command = []string{"/nr1-load32"}
				}
				return running(t, c, createPod(t, c, p))
			}
			if mode == "dra" {
				node := nodeName(t, c)
				t.Cleanup(func() { deleteNodeSlices(t, c, node) }) // run after the agent is back
			}
			withConfig(t, c, func(cfg map[string]any) {
				cfg["mode"] = mode
				cfg["prevention"] = map[string]any{"enabled": true}
			})
			eventually(t, 30*time.Second, "the node labelled with the gate on", func() error {
				n, err := c.CoreV1().Nodes().Get(context.Background(), nodeName(t, c), metav1.GetOptions{})
				if err != nil {
					return err
				}
				if v := n.Labels[nodelabels.PreventionLabel]; v != "on" {
					return fmt.Errorf("%s=%q", nodelabels.PreventionLabel, v)
				}
				return nil
			})
			if mode == "dra" {
				newNamespace(t, c, draNS) // removed while the DRA driver still runs
				cg = func(name string, bits32 bool, args ...string) *corev1.Pod {
					hh := loadContainer("health-handler", args...)
					hh.Resources.Claims = []corev1.ResourceClaim{{Name: manifest.RequestName}}
					if bits32 {
						hh.Command = []string{"/nr1-load32"}
					}
					return runningPod(t, c, createDRAPod(t, c, name, resnet, corev1.PodSpec{Containers: []corev1.Container{hh}}))
				}
			}
			// DRA's prepare step books a pod before its cgroup is made, the device
			// plugin before its container is: none of its opens is one the gate has no
			// booking for.
			// A minute of the worker pool in one mode; in the other, as long as the rest.
			checkPrevention(t, c, cg, map[string]time.Duration{"devicePlugin": time.Minute}[mode])
			if mode == "devicePlugin" {
				checkInitContainerBooking(t, c)
			}
		})
	}
}

// checkPrevention runs the CGs of TestPrevention, made by cg with the ResNet-50 booking.
func checkPrevention(t *testing.T, c kubernetes.Interface, cg func(name string, bits32 bool, args ...string) *corev1.Pod, poolFor time.Duration) {
	// Booked 7: 5, then 9 asked for, then a try every second.
	hog := cg("gated-hog", false, "--queues=5", "--step=6s:queues=9", "--probe=1s")
	hog32 := cg("gated-hog32", true, "--queues=5", "--step=6s:queues=9", "--probe=1s")
	within := cg("gated-within", false, "--queues=7")
	// Booked 7: 3 held, and 4 workers that each open one, hold it 150 ms and exit, one
	// after another, through an agent restart: at its booking all along.
	pool := cg("gated-pool", false, "--queues=3", "--pool=4", "--pool-hold=150ms")
	pool32 := cg("gated-pool32", true, "--queues=3", "--pool=4", "--pool-hold=150ms")
	poolStarted := time.Now()
	for _, h := range []*corev1.Pod{hog, hog32} {
		waitReason(t, c, h, "NR1OpenRefused", 40*time.Second)
		if _, ok := logLineAt(t, c, h, "health-handler", "refused: opening queue 8 of"); !ok {
			t.Fatalf("%s's eighth open was not refused", h.Name)
		}
		if _, ok := logLineAt(t, c, h, "health-handler", " queues=7 "); !ok {
			t.Fatalf("%s does not hold the 7 it booked", h.Name)
		}
		if _, ok := logLineAt(t, c, h, "health-handler", "disk quota exceeded"); !ok {
			t.Errorf("%s's refusal is not EDQUOT", h.Name)
		}
	}

	// The host's own processes are not the gate's: this test is one.
	f, err := os.OpenFile(filepath.Join(simDir(), "dev", "nr1_0_hv_queue"), os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("a host process's open of the queue device: %v", err)
	}
	_ = f.Close()

	// Through an agent restart every probe of the hog is still refused.
	restarted := time.Now()
	restartAgent(t, c)
	if at, ok := logLineAt(t, c, hog, "health-handler", "probe opened"); ok {
		t.Errorf("the hog opened a queue past its booking at %s", at.Format(time.RFC3339Nano))
	}
	if n := logLinesSince(t, c, hog, "probe refused: ", restarted); n < 3 {
		t.Errorf("%d probes refused since the agent's restart, want one a second", n)
	}

	agent, err := readyAgent(c)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the gate's metrics", func() error {
		_, body, err := getMetrics(agent.Status.PodIP)
		if err != nil {
			return err
		}
		series := func(name string, p *corev1.Pod) string {
			return fmt.Sprintf(`%s{namespace=%q,pod=%q,resource="ai_hypervisor_queue",uid=%q}`, name, p.Namespace, p.Name, p.UID)
		}
		for s, want := range map[string]func(float64) bool{
			`nr1_gate_enabled{configured="true"}`:    eq(1),
			series("nr1_gate_refused_total", hog):    atLeast(3),
			series("nr1_gate_held", hog):             eq(7),
			series("nr1_gate_refused_total", within): eq(0),
			series("nr1_gate_held", within):          eq(7),
			series("nr1_gate_refused_total", pool):   eq(0),
			series("nr1_gate_refused_total", hog32):  atLeast(1),
			series("nr1_gate_held", hog32):           eq(7),
			series("nr1_gate_refused_total", pool32): eq(0),
			`nr1_gate_false_refusals_total`:          eq(0),
		} {
			v, ok := seriesValue(body, s)
			if !ok || !want(v) {
				return fmt.Errorf("%s = %v (found %v)", s, v, ok)
			}
		}
		if allowed, _ := seriesValue(body, `nr1_gate_unknown_opens_total{outcome="allowed"}`); allowed != 0 {
			t.Errorf("%g opens by pods the gate had no booking of yet", allowed)
		}
		return nil
	})
	checkPool(t, c, pool, poolStarted, poolFor)
	checkPool(t, c, pool32, poolStarted, 0)
	for _, p := range []*corev1.Pod{hog, hog32, within, pool, pool32} {
		for _, ev := range nr1Events(t, c, p) {
			if ev.Reason != "NR1OpenRefused" {
				t.Errorf("%s: %s %s: a ladder acted on a CG that never held more than it booked", p.Name, ev.Reason, ev.Message)
			}
		}
		if got := running(t, c, p); got.Status.ContainerStatuses[0].RestartCount != 0 {
			t.Errorf("%s restarted", p.Name)
		}
	}
}

// checkPool waits until the pool's workers ran for at least d and reads their counts:
// every open went through, about one every 40 ms (4 workers, each a process holding
// 150 ms); one count is logged every 5 s.
func checkPool(t *testing.T, c kubernetes.Interface, pool *corev1.Pod, started time.Time, d time.Duration) {
	t.Helper()
	time.Sleep(time.Until(started.Add(d + 5*time.Second)))
	var opens, refused, failed int
	counted := false
	logs, err := c.CoreV1().Pods(pool.Namespace).GetLogs(pool.Name, &corev1.PodLogOptions{Container: "health-handler"}).DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(logs)) {
		_, rest, _ := strings.Cut(strings.TrimSpace(line), " ")
		if strings.HasPrefix(rest, "pool refused: ") || strings.HasPrefix(rest, "pool failed: ") {
			t.Errorf("the pool, at its booking: %s", strings.TrimSpace(line))
		}
		if _, err := fmt.Sscanf(rest, "pool opens=%d refused=%d failed=%d", &opens, &refused, &failed); err == nil {
			counted = true
		}
	}
	if !counted {
		t.Fatalf("the pool logged no counts:\n%s", logs)
	}
	t.Logf("the pool at its booking, %v: opens=%d refused=%d failed=%d", time.Since(started).Round(time.Second), opens, refused, failed)
	if least := int(time.Since(started)/time.Second) * 5; opens < least || refused != 0 || failed != 0 {
		t.Errorf("the pool at its booking for %v: opens=%d refused=%d failed=%d; want at least %d opens, none refused or failed", time.Since(started).Round(time.Second), opens, refused, failed, least)
	}
}

// checkInitContainerBooking: an init container booking more queues than the main
// containers together opens all it booked. The kubelet lists no init container that runs
// to completion, and it starts first: booked at the main containers' sum, its opens past
// it would be refused inside its own booking.
func checkInitContainerBooking(t *testing.T, c kubernetes.Interface) {
	// Each books its image and a writable layer: a runtime may count the image in the
	// docker partition (CRI-O does), and a booking of 0 there is over at once.
	partition := nr1LoadImageMB(t) + 2
	p := loadPod("gated-init", "--queues=1")
	p.Spec.Containers[0].Resources = nr1Requests(nr1.Amounts{0, 0, partition, 1})
	fetch := loadContainer("fetch", "--queues=4", "--exit", "--status-file=")
	fetch.Resources = nr1Requests(nr1.Amounts{0, 0, partition, 4})
	p.Spec.InitContainers = []corev1.Container{fetch}
	p = running(t, c, createPod(t, c, p))
	if _, ok := logLineAt(t, c, p, "fetch", "refused"); ok {
		t.Error("the init container was refused an open within its booking of 4")
	}
	if _, ok := logLineAt(t, c, p, "fetch", " queues=4 "); !ok {
		t.Error("the init container did not hold the 4 queues it booked")
	}
	for _, ev := range nr1Events(t, c, p) {
		t.Errorf("%s: %s %s: an Event on a CG that held no more than it booked", p.Name, ev.Reason, ev.Message)
	}
}

// logLinesSince counts nr1-load's log lines containing marker stamped after since.
func logLinesSince(t *testing.T, c kubernetes.Interface, pod *corev1.Pod, marker string, since time.Time) int {
	t.Helper()
	logs, err := c.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{Container: "health-handler"}).DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(logs), "\n") {
		stamp, rest, _ := strings.Cut(line, " ")
		if at, err := time.Parse(time.RFC3339Nano, stamp); err == nil && strings.Contains(rest, marker) && at.After(since) {
			n++
		}
	}
	return n
}

// seriesValue is the value of one series, written as the exposition writes it.
func seriesValue(body, series string) (float64, bool) {
	for _, line := range strings.Split(body, "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(rest, 64)
			return v, err == nil
		}
	}
	return 0, false
}

func eq(want float64) func(float64) bool      { return func(v float64) bool { return v == want } }
func atLeast(want float64) func(float64) bool { return func(v float64) bool { return v >= want } }
