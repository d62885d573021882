// SPDX-License-Identifier: Apache-2.0

//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/neureality-sdk/nr1-agent/nr1"
)

// nr1LoadImage is the workload image, imported offline.
const nr1LoadImage = "nr1.local/nr1-load:dev"

// nr1Requests is a container's resources with a as requests and limits.
func nr1Requests(a nr1.Amounts) corev1.ResourceRequirements {
	rl := corev1.ResourceList{}
	for _, r := range nr1.All {
		rl[corev1.ResourceName(r.Name())] = *resource.NewQuantity(int64(a[r]), resource.DecimalSI)
	}
	return corev1.ResourceRequirements{Requests: rl, Limits: rl.DeepCopy()}
}

// loadContainer runs nr1-load with args.
func loadContainer(name string, args ...string) corev1.Container {
	return corev1.Container{Name: name, Image: nr1LoadImage, ImagePullPolicy: corev1.PullNever, Args: args}
}

// loadPod is a CG whose health-handler runs nr1-load with the given arguments, with the
// ResNet-50 allocation.
func loadPod(name string, args ...string) *corev1.Pod {
	hh := loadContainer("health-handler", args...)
	hh.Resources = nr1Requests(nr1.Amounts{3, 0, 2392, 7})
	grace := int64(1)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever, TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{hh},
		},
	}
}

// holdings parses nr1-load's log: the time of each change and what it held then.
func holdings(t *testing.T, c kubernetes.Interface, pod *corev1.Pod) []struct {
	at   time.Time
	line string
} {
	t.Helper()
	logs, err := c.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{Container: "health-handler"}).DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []struct {
		at   time.Time
		line string
	}
	// A step nr1-load was killed while taking, before it said it holds it, counts from
	// when it began taking it: a lag measured from there is no shorter than the real one.
	var stepping string
	var since time.Time
	sc := bufio.NewScanner(strings.NewReader(string(logs)))
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), " ", 2)
		if len(f) != 2 || !strings.HasPrefix(f[1], "holding") && !strings.HasPrefix(f[1], "stepping to ") {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, f[0])
		if err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		if next, ok := strings.CutPrefix(f[1], "stepping to "); ok {
			stepping, since = "holding "+next, at
			continue
		}
		stepping = ""
		out = append(out, struct {
			at   time.Time
			line string
		}{at, f[1]})
	}
	if stepping != "" {
		out = append(out, struct {
			at   time.Time
			line string
		}{since, stepping})
	}
	return out
}

func imageSize(t testing.TB, image string) int64 {
	t.Helper()
	var st struct {
		Status struct {
			Size string `json:"size"`
		} `json:"status"`
	}
	if err := json.Unmarshal(run(t, "crictl", "inspecti", "-o", "json", image), &st); err != nil {
		t.Fatal(err)
	}
	var n int64
	fmt.Sscan(st.Status.Size, &n)
	return n
}

// TestFootprintFollowsTheWorkload: an nr1-load CG goes from 1 MB and 2 queues to 3 MB,
// 7 queues and 100 MB written to its writable layer; the agent must report each state
// within two sampling intervals (two partition intervals for the docker partition).
func TestFootprintFollowsTheWorkload(t *testing.T) {
	c := client(t)
	pod := running(t, c, createPod(t, c, loadPod("footprint", "--compute-dma-mb=1", "--queues=2", "--step=5s:compute=3,queues=7,write=100")))
	const interval, partitionInterval = time.Second, 10 * time.Second
	observe := func(what string, timeout time.Duration, ok func(u nr1.Usage) bool) (time.Time, nr1.Usage) {
		var seen nr1.Usage
		deadline := time.Now().Add(timeout)
		for {
			if s, err := agentDebug(t, c); err == nil {
				if cg := s.CG(string(pod.UID)); cg != nil {
					seen = cg.Usage
					if ok(cg.Usage) {
						return time.Now(), cg.Usage
					}
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not seen within %v; last usage %v", what, timeout, seen)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	seenFirst, _ := observe("1 MB and 2 queues", 30*time.Second, func(u nr1.Usage) bool {
		return u[nr1.ComputeDMAMemory] == 1<<20 && u[nr1.HypervisorQueue] == 2
	})
	seenSecond, _ := observe("3 MB and 7 queues", 30*time.Second, func(u nr1.Usage) bool {
		return u[nr1.ComputeDMAMemory] == 3<<20 && u[nr1.HypervisorQueue] == 7
	})
	img := nr1.Base(imageSize(t, nr1LoadImage))
	seenWrite, u := observe("image + 100 MB in the docker partition", 60*time.Second, func(u nr1.Usage) bool {
		return u[nr1.DockerPartition] >= img+100<<20
	})
	if extra := u[nr1.DockerPartition] - img - 100<<20; extra > 1<<20 {
		t.Errorf("docker partition %d bytes: %d over image (%d) + 100 MiB", u[nr1.DockerPartition], extra, img)
	}
	h := holdings(t, c, pod)
	if len(h) != 2 {
		t.Fatalf("nr1-load logged %d changes, want 2", len(h))
	}
	for _, check := range []struct {
		name    string
		changed time.Time
		seen    time.Time
		within  time.Duration
	}{
		{"first holding", h[0].at, seenFirst, 2 * interval},
		{"second holding", h[1].at, seenSecond, 2 * interval},
		{"100 MB written", h[1].at, seenWrite, 2 * partitionInterval},
	} {
		lag := check.seen.Sub(check.changed)
		t.Logf("%s: seen %v after nr1-load reported it", check.name, lag.Round(time.Millisecond))
		if lag > check.within {
			t.Errorf("%s seen %v after the change, want within %v", check.name, lag, check.within)
		}
	}
}
