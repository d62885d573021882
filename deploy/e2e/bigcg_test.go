// SPDX-License-Identifier: Apache-2.0

//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/neureality-sdk/nr1-agent/agent/offer/statusfit"
	"github.com/neureality-sdk/nr1-agent/nr1"
	"github.com/neureality-sdk/nr1-agent/nr1/manifest"
)

const bigNS = "nr1-big"

// TestBigCG: a CG booking most of the node (100,000 MB of compute DMA of the 116,244 it
// has) runs with its status in the API, is known to the agent with its whole booking,
// and is deleted, in both modes. In device-plugin mode one MB is one device: with the
// kubelet's resource health on, its status would carry an entry per MB, past what the
// API server takes, and the pod would stay Pending in the API and never go away.
func TestBigCG(t *testing.T) {
	c := client(t)
	booked := nr1.Amounts{100000, 0, nr1LoadImageMB(t) + 2, 1}
	t.Run("devicePlugin", func(t *testing.T) {
		newNamespace(t, c, bigNS)
		bigCG(t, c, bookingCG(bigNS, "big", booked, nr1.Amounts{}, nil), booked)
	})
	t.Run("dra", func(t *testing.T) {
		node := nodeName(t, c)
		t.Cleanup(func() { deleteNodeSlices(t, c, node) })
		withConfig(t, c, func(cfg map[string]any) { cfg["mode"] = "dra" })
		ns := bigNS + "-dra"
		newNamespace(t, c, ns)
		mustReadyAgent(t, c)
		template := createTemplate(t, c, manifest.ClaimTemplate(ns, "big", booked))
		bigCG(t, c, bookingCG(ns, "big", booked, nr1.Amounts{}, template), booked)
	})
}

// bigCG creates pod, requires it Running in the API and known to the agent with its
// booking, then deletes it and requires it gone.
func bigCG(t *testing.T, c kubernetes.Interface, pod *corev1.Pod, booked nr1.Amounts) {
	t.Helper()
	created := createPod(t, c, pod)
	p := running(t, c, created)
	eventually(t, 30*time.Second, "the big CG known with its booking", func() error {
		agent, err := readyAgent(c)
		if err != nil {
			return err
		}
		cg, err := cgView(agent, p)
		if err != nil {
			return err
		}
		if !cg.AllocationKnown || cg.Allocation != booked {
			return fmt.Errorf("allocation %v known %v (%s)", cg.Allocation, cg.AllocationKnown, cg.AllocationUnknown)
		}
		return nil
	})
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s booking %v: Running, its object %d KiB", p.Name, booked, len(b)>>10)
	for _, ev := range nr1Events(t, c, p) {
		t.Errorf("%s, within its booking, got NR1 Event %s: %s", p.Name, ev.Reason, ev.Message)
	}
	start := time.Now()
	if err := c.CoreV1().Pods(p.Namespace).Delete(context.Background(), p.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, p.Name+" deleted", func() error {
		_, err := c.CoreV1().Pods(p.Namespace).Get(context.Background(), p.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return errors.Join(errors.New("still there"), err)
	})
	t.Logf("%s deleted in %v", p.Name, time.Since(start).Round(100*time.Millisecond))
	waitReleased(t, p.Namespace, p.Name)
}

// TestStatusTooLargeIsTold: with the kubelet's resource health on, a CG booking 100,000
// MB through the device plugin cannot get a status; the agent says so on the pod, naming
// the fix, as soon as it sees the pod.
func TestStatusTooLargeIsTold(t *testing.T) {
	c := client(t)
	replugged(t, c, func() { runStack(t, "resource-health", "on") })
	t.Cleanup(func() {
		// The tests after this one find the kubelet offering the NR1 again.
		replugged(t, c, func() { runStack(t, "resource-health", "off") })
		waitAllocatable(t, c, nodeName(t, c), simCapacity[corev1.ResourceName(nr1.ComputeDMAMemory.Name())])
	})
	ns := bigNS + "-told"
	newNamespace(t, c, ns)
	pod := createPod(t, c, bookingCG(ns, "big", nr1.Amounts{100000, 0, nr1LoadImageMB(t) + 2, 1}, nr1.Amounts{}, nil))
	ev := waitReason(t, c, pod, statusfit.Reason, 60*time.Second)
	t.Logf("%s: %s", ev.Reason, ev.Message)
	// What it told of is so: the kubelet started the CG and cannot write its status.
	time.Sleep(10 * time.Second)
	if p, err := c.CoreV1().Pods(ns).Get(context.Background(), pod.Name, metav1.GetOptions{}); err != nil || p.Status.Phase != corev1.PodPending || len(p.Status.ContainerStatuses) != 0 {
		t.Errorf("told of a status the kubelet could not write, and the API shows %v (%v)", p.Status, err)
	}
	for _, want := range []string{"ResourceHealthStatus=true in the kubelet's --config", "ResourceHealthStatus and ResourceHealthStatusMessage off"} {
		if !strings.Contains(ev.Message, want) {
			t.Errorf("the Event does not say %q", want)
		}
	}
	zero := int64(0)
	if err := c.CoreV1().Pods(ns).Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	waitReleased(t, ns, pod.Name)
}

// replugged restarts the kubelet with restart and waits for the agent's four device
// plugins to have registered with it again: the node's status comes from the kubelet's
// checkpoint and offers the NR1 before they have, and a pod admitted then is refused.
func replugged(t *testing.T, c kubernetes.Interface, restart func()) {
	t.Helper()
	before := -1
	eventually(t, 60*time.Second, "the agent's registrations read", func() error {
		if before = registrations(t, c); before < 0 {
			return errors.New("nr1_kubelet_registrations_total not read")
		}
		return nil
	})
	restart()
	eventually(t, 60*time.Second, "the agent's four plugins registered with the restarted kubelet", func() error {
		if n := registrations(t, c); n < before+4 {
			return fmt.Errorf("%d registrations, %d before the restart", n, before)
		}
		return nil
	})
}
