// SPDX-License-Identifier: Apache-2.0

//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/neureality-sdk/nr1-agent/agent/observe/allocation"
	"github.com/neureality-sdk/nr1-agent/agent/offer/statusfit"
	"github.com/neureality-sdk/nr1-agent/agent/view"
	"github.com/neureality-sdk/nr1-agent/nr1"
)

// BenchmarkStatusCeiling finds, in device-plugin mode with the kubelet's resource health
// on (its default since 1.36), the largest compute DMA booking whose pod gets a status
// in the API: the kubelet writes one status entry per allocated device, one per MB. A
// booking is tried by running a CG with it and waiting for it to be Running in the API;
// the search stops within 1% of the node's capacity. It reports the ceiling and the
// pod's size at it, and then the same booking with resource health off. make
// bench-ceiling runs it on the local stack and leaves resource health off.
func BenchmarkStatusCeiling(b *testing.B) {
	c := client(b)
	node, err := c.CoreV1().Nodes().Get(context.Background(), nodeName(b, c), metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	q := node.Status.Allocatable[corev1.ResourceName(nr1.ComputeDMAMemory.Name())]
	capacity := q.Value()
	newNamespace(b, c, bigNS)
	image := nr1LoadImageMB(b) + 2
	for b.Loop() {
		// Nothing ended left allocated in the kubelet's checkpoint (see waitReleased).
		waitReleased(b, bigNS, "ceiling")
		runStack(b, "resource-health", "on")
		waitAllocatable(b, c, node.Name, capacity)
		lo, hi := int64(0), capacity+1 // lo gets a status; hi does not (or is past capacity)
		var size int
		for hi-lo > capacity/100 {
			mid := (lo + hi) / 2
			ok, n := statusWritten(b, c, booked(image)(mid))
			b.Logf("resource health on: %d MB of compute DMA %s", mid, map[bool]string{true: fmt.Sprintf("Running, pod %d KiB", n>>10), false: "never gets a status"}[ok])
			if ok {
				lo, size = mid, n
			} else {
				hi = mid
			}
		}
		b.ReportMetric(float64(lo), "ceiling-MB")
		// The agent tells of a booking past what it estimates fits: never later than the
		// largest booking seen to get a status, the true ceiling lying between that and
		// the first seen to get none.
		told := toldAbove(booked(image))
		b.ReportMetric(float64(told), "agent-tells-above-MB")
		if told > lo {
			b.Errorf("the agent tells of bookings above %d MB; %d MB gets a status, %d MB none: those between may go untold", told, lo, hi)
		}
		b.ReportMetric(float64(size>>10), "pod-KiB-at-ceiling")
		b.ReportMetric(100*float64(lo)/float64(capacity), "ceiling-%-of-node")
		runStack(b, "resource-health", "off")
		waitAllocatable(b, c, node.Name, capacity)
		ok, n := statusWritten(b, c, nr1.Amounts{nr1.Units(capacity), 0, image, 1})
		b.Logf("resource health off: the node's whole %d MB Running: %v, pod %d KiB", capacity, ok, n>>10)
		if !ok {
			b.Errorf("with resource health off, a CG booking the node's %d MB never got a status", capacity)
		}
	}
}

// runStack runs deploy/local/stack.sh with args.
func runStack(tb testing.TB, args ...string) {
	tb.Helper()
	run(tb, repo+"/deploy/local/stack.sh", args...)
}

// statusWritten runs a CG booking booked in device-plugin mode and says whether the API
// shows it Running within 30 s, with the size of its object then. The CG is then
// deleted, by force when it has no status (the kubelet could not report it terminated
// either), and gone before the next try. A CG the kubelet refused (its devices not yet
// freed from the last try) is tried again.
func statusWritten(tb testing.TB, c kubernetes.Interface, booked nr1.Amounts) (bool, int) {
	tb.Helper()
	for range 3 {
		ok, size, refused := tryStatus(tb, c, booked)
		if !refused {
			return ok, size
		}
		time.Sleep(5 * time.Second)
	}
	tb.Fatalf("a CG booking %v refused by the kubelet three times", booked)
	return false, 0
}

func tryStatus(tb testing.TB, c kubernetes.Interface, booked nr1.Amounts) (ok bool, size int, refused bool) {
	ctx := context.Background()
	pods := c.CoreV1().Pods(bigNS)
	pod := bookingCG(bigNS, "ceiling", booked, nr1.Amounts{}, nil)
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		tb.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(time.Second) {
		p, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			continue
		}
		if p.Status.Phase == corev1.PodRunning {
			b, _ := json.Marshal(p)
			ok, size = true, len(b)
			break
		}
		if p.Status.Phase == corev1.PodFailed {
			tb.Logf("%v refused: %s %s", booked, p.Status.Reason, p.Status.Message)
			refused = true
			break
		}
	}
	zero := int64(0)
	if err := pods.Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil && !apierrors.IsNotFound(err) {
		tb.Fatal(err)
	}
	eventually(tb, 60*time.Second, "the tried CG gone", func() error {
		if _, err := pods.Get(ctx, pod.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return errors.Join(errors.New("still there"), err)
		}
		return nil
	})
	waitReleased(tb, bigNS, pod.Name)
	return ok, size, refused
}

// waitReleased waits until the kubelet no longer lists the pod namespace/name in its
// pod-resources answer. Each List also makes the kubelet free the devices of pods that
// ended: a kubelet restarted with the resource health on looks up, for each device, the
// pod holding it among every allocation in its checkpoint, which with a big CG's
// allocation left there takes it minutes, its device manager locked.
func waitReleased(tb testing.TB, namespace, name string) {
	tb.Helper()
	pr, err := allocation.Dial("/var/lib/kubelet/pod-resources/kubelet.sock", nr1.Amounts{1 << 20, 1 << 20, 1 << 20, 1 << 20})
	if err != nil {
		tb.Fatal(err)
	}
	defer pr.Close()
	eventually(tb, 60*time.Second, namespace+"/"+name+"'s devices released by the kubelet", func() error {
		t, err := pr.List(context.Background())
		if err != nil {
			return err
		}
		if _, listed := t.Pod(namespace, name); listed {
			return errors.New("still listed")
		}
		return nil
	})
}

// waitAllocatable waits until the node offers its whole compute DMA again, the device
// plugin registered with a restarted kubelet.
func waitAllocatable(tb testing.TB, c kubernetes.Interface, node string, capacity int64) {
	tb.Helper()
	eventually(tb, 60*time.Second, "the node's compute DMA allocatable again", func() error {
		n, err := c.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if q := n.Status.Allocatable[corev1.ResourceName(nr1.ComputeDMAMemory.Name())]; q.Value() != capacity {
			return fmt.Errorf("allocatable %s", q.String())
		}
		return nil
	})
}

// booked is the ceiling's CG booking mb of compute DMA, its image and a queue.
func booked(image nr1.Units) func(mb int64) nr1.Amounts {
	return func(mb int64) nr1.Amounts { return nr1.Amounts{nr1.Units(mb), 0, image, 1} }
}

// toldAbove is the largest compute DMA booking the agent does not tell of.
func toldAbove(booking func(mb int64) nr1.Amounts) int64 {
	lo, hi := int64(0), int64(1)<<24
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		cg := &view.CG{Containers: []*view.Container{{Allocation: booking(mid), AllocationSource: view.FromPodResources}}}
		if statusfit.StatusBytes(cg) <= statusfit.Budget {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}
