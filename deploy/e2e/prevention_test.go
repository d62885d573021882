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
)

// TestPrevention turns the budget gate on: a CG that tries to hold more queues than it
// booked has the opens past its booking refused by the kernel (EDQUOT), is told so in
// an Event and counted, and no ladder acts on it, since it never held more; a CG within
// its booking and the host's own processes are never refused; the gate keeps refusing
// through an agent restart; turned off, the gate is removed.
func TestPrevention(t *testing.T) {
	c := client(t)
	stack := filepath.Join(repo, "deploy", "local", "stack.sh")
	setAgentConfig(t, c, "prevention:\n  enabled: true\n")
	t.Cleanup(func() {
		run(t, stack, "deploy") // back to the overlay's configuration: prevention off
		eventually(t, 60*time.Second, "the gate removed by an agent with prevention off", func() error {
			if _, err := os.Stat("/sys/fs/bpf/nr1-agent/gate"); !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("/sys/fs/bpf/nr1-agent/gate: %v", err)
			}
			return nil
		})
	})
	rollOutAgent(t)

	// Booked 7 (loadPod's booking): 5, then 9 asked for, then a try every second.
	hog := running(t, c, createPod(t, c, loadPod("gated-hog", "--queues=5", "--step=6s:queues=9", "--probe=1s")))
	within := running(t, c, createPod(t, c, loadPod("gated-within", "--queues=7")))
	waitReason(t, c, hog, "NR1OpenRefused", 40*time.Second)
	if _, ok := logLineAt(t, c, hog, "health-handler", "refused: opening queue 8 of"); !ok {
		t.Fatal("the hog's eighth open was not refused")
	}
	if _, ok := logLineAt(t, c, hog, "health-handler", " queues=7 "); !ok {
		t.Fatal("the hog does not hold the 7 it booked")
	}
	if _, ok := logLineAt(t, c, hog, "health-handler", "disk quota exceeded"); !ok {
		t.Error("the refusal is not EDQUOT")
	}

	// The host's own processes are not the gate's: this test is one.
	f, err := os.OpenFile(filepath.Join(simDir(), "dev", "nr1_0_hv_queue"), os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("a host process's open of the queue device: %v", err)
	}
	_ = f.Close()

	// Through an agent restart every probe of the hog is still refused.
	restarted := time.Now()
	rollOutAgent(t)
	time.Sleep(3 * time.Second)
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
		for series, want := range map[string]func(float64) bool{
			`nr1_gate_enabled`: eq(1),
			`nr1_gate_refused_total{namespace="default",pod="gated-hog",resource="ai_hypervisor_queue",uid="` + string(hog.UID) + `"}`:       atLeast(3),
			`nr1_gate_held{namespace="default",pod="gated-hog",resource="ai_hypervisor_queue",uid="` + string(hog.UID) + `"}`:              eq(7),
			`nr1_gate_refused_total{namespace="default",pod="gated-within",resource="ai_hypervisor_queue",uid="` + string(within.UID) + `"}`: eq(0),
			`nr1_gate_held{namespace="default",pod="gated-within",resource="ai_hypervisor_queue",uid="` + string(within.UID) + `"}`:         eq(7),
			`nr1_gate_false_refusals_total`: eq(0),
		} {
			v, ok := seriesValue(body, series)
			if !ok || !want(v) {
				return fmt.Errorf("%s = %v (found %v)", series, v, ok)
			}
		}
		return nil
	})
	for _, p := range []*corev1.Pod{hog, within} {
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

// setAgentConfig appends yaml to the agent's configuration; rollOutAgent makes it
// count.
func setAgentConfig(t *testing.T, c kubernetes.Interface, yaml string) {
	t.Helper()
	cm, err := c.CoreV1().ConfigMaps("nr1-system").Get(context.Background(), "nr1-agent", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["config.yaml"] += yaml
	if _, err := c.CoreV1().ConfigMaps("nr1-system").Update(context.Background(), cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func rollOutAgent(t *testing.T) {
	t.Helper()
	run(t, "kubectl", "-n", "nr1-system", "rollout", "restart", "daemonset/nr1-agent")
	run(t, "kubectl", "-n", "nr1-system", "rollout", "status", "daemonset/nr1-agent", "--timeout=120s")
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
