// SPDX-License-Identifier: Apache-2.0

//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TestStrangersPath is the agent's life in a stranger's cluster, in one go, with the
// README's commands: releases pushed to a registry (the previous one, then this one, by
// make release), the previous installed from oci:// into a cluster running
// kube-prometheus-stack's Operator, with the chart's own ServiceMonitor and
// PrometheusRule; CGs, one exempt and over, one throttled, one killed; the alerts firing
// for the right pods; helm upgrade to this release from oci://, and helm rollback, each
// taking the CGs over as they were; then helm uninstall, which leaves nothing of the
// agent's on the node.
func TestStrangersPath(t *testing.T) {
	registry, ca := os.Getenv("NR1_REGISTRY"), os.Getenv("NR1_REGISTRY_CA")
	if registry == "" || ca == "" {
		t.Fatal("NR1_REGISTRY and NR1_REGISTRY_CA unset: run under make e2e, or after eval $(deploy/local/stack.sh env)")
	}
	c := client(t)
	prom := kubePrometheusStack(t, c)

	old := releasePrevious(t)
	version := strings.TrimSpace(string(run(t, "make", "-s", "-C", repo, "version")))
	out := run(t, "make", "-s", "-C", repo, "release", "REGISTRY="+registry, "REGISTRY_CA="+ca)
	if !strings.Contains(string(out), "chart oci://"+registry+"/charts/nr1-agent --version "+strings.TrimPrefix(version, "v")) {
		t.Fatalf("make release said:\n%s", out)
	}
	ladder := filepath.Join(t.TempDir(), "ladder.yaml")
	writeFile(t, ladder, []byte(upgradeValues))

	makeWayForARelease(t, c)
	// As the README says it (the Prometheus Operator's objects as its "Prometheus"
	// section does), pulled always: a stack left up may hold the image from an earlier
	// run.
	run(t, "helm", append([]string{"install", "nr1-agent", "oci://" + registry + "/charts/nr1-agent", "--version", strings.TrimPrefix(old, "v"),
		"--namespace", "nr1-system", "--create-namespace", "--ca-file", ca, "-f", stackValues(t), "-f", ladder,
		"--set", "prometheus.serviceMonitor=true,prometheus.rules=true", "--set", "prometheus.additionalLabels.release=kps",
		"--set", "image.pullPolicy=Always", "--wait", "--timeout", "3m"}, runtimeValues()...)...)
	pulledFromTheRegistry(t, c, registry+"/nr1-agent:"+old)

	time.Sleep(12 * time.Second) // the enforcement warm-up (10 s) after a start
	labelledNamespace(t, c, "nr1-stranger-exempt", map[string]string{exemptLabel: "disabled"})
	exempt := loadPod("stranger-exempt", "--queues=10")
	exempt.Namespace = "nr1-stranger-exempt"
	exempt = running(t, c, createPod(t, c, exempt))
	steady := running(t, c, createPod(t, c, loadPod("stranger-steady", "--compute-dma-mb=3", "--queues=7")))
	over := running(t, c, createPod(t, c, loadPod("stranger-over", "--compute-dma-mb=2", "--step=3s:compute=4")))
	hog := running(t, c, createPod(t, c, loadPod("stranger-hog", "--queues=2", "--step=3s:queues=20")))
	waitReason(t, c, over, "NR1Throttled", 40*time.Second)
	waitReason(t, c, hog, "NR1Killed", 40*time.Second)
	eventually(t, 30*time.Second, "the hog ended Failed", func() error {
		p, err := c.CoreV1().Pods(hog.Namespace).Get(context.Background(), hog.Name, metav1.GetOptions{})
		if err == nil && p.Status.Phase != corev1.PodFailed {
			err = fmt.Errorf("phase %s", p.Status.Phase)
		}
		return err
	})

	// The alerts, each for the right pods: over its allocation the exempt CG and the
	// throttled one (a throttle stops it taking more, not what it holds), never the steady
	// one; the kill.
	alerts := func(what string) {
		eventually(t, 2*time.Minute, what, func() error {
			as, err := promAlerts(prom)
			if err != nil {
				return err
			}
			var overAllocated []string
			killed := false
			for _, a := range as {
				switch {
				case a.Labels["alertname"] == "NR1CGOverAllocation" && a.State == "firing":
					if p := a.Labels["namespace"] + "/" + a.Labels["pod"]; !slices.Contains(overAllocated, p) {
						overAllocated = append(overAllocated, p)
					}
				case a.Labels["alertname"] == "NR1EnforcementKillOrEviction" && a.State == "firing":
					killed = killed || a.Labels["action"] == "kill"
				}
			}
			slices.Sort(overAllocated)
			want := []string{"default/" + over.Name, exempt.Namespace + "/" + exempt.Name}
			if !slices.Equal(overAllocated, want) {
				return fmt.Errorf("NR1CGOverAllocation firing for %v, want %v", overAllocated, want)
			}
			if !killed {
				return errors.New("NR1EnforcementKillOrEviction not firing for a kill")
			}
			return nil
		})
		if got, err := promQuery(prom, `{__name__=~"nr1_.+", exported_pod!=""}`); err != nil || len(got) > 0 {
			t.Errorf("%s: series with the CG's labels overwritten (exported_*): %v %v", what, got, err)
		}
		// The job the rules name (NR1AgentDown: up{job="nr1-agent"}), whatever the
		// Service is called: the running agent's target (the one it replaced may stay
		// listed a while).
		agent := mustReadyAgent(t, c)
		eventually(t, time.Minute, what+": the agent's target up", func() error {
			got, err := promQuery(prom, `up{job="nr1-agent",pod="`+agent.Name+`"} == 1`)
			if err == nil && len(got) != 1 {
				err = fmt.Errorf("up{job=\"nr1-agent\",pod=%q}: %v", agent.Name, got)
			}
			return err
		})
	}
	alerts("the alerts under the previous release")

	h := before(t, c, over, steady, over, exempt)
	if got := h.events[steady.Name]; got != "" {
		t.Fatalf("%s acted on: %s", steady.Name, got)
	}
	h.replace(t, "the upgrade", registry+"/nr1-agent:"+version, func() {
		run(t, "helm", "upgrade", "nr1-agent", "oci://"+registry+"/charts/nr1-agent", "--version", strings.TrimPrefix(version, "v"),
			"--namespace", "nr1-system", "--reuse-values", "--ca-file", ca, "--wait", "--timeout", "3m")
	})
	agent := pulledFromTheRegistry(t, c, registry+"/nr1-agent:"+version)
	// The agent says what it was built from: this checkout's commit.
	head := strings.TrimSpace(string(run(t, "git", "-C", repo, "rev-parse", "HEAD")))
	if _, body, err := getMetrics(agent.Status.PodIP); err != nil || !strings.Contains(body, `revision="`+head) || !strings.Contains(body, `version="`+version+`"`) {
		t.Errorf("nr1_build_info does not name version %s, revision %s: %v\n%s", version, head, err, grepLines(body, "nr1_build_info"))
	}
	alerts("the alerts after the upgrade")
	checkDashboard(t, prom, agent.Spec.NodeName)

	// Without honorLabels the operator's target labels win: the CG's series name the
	// agent's pod, and the CG's own become exported_*. The check above can fail.
	run(t, "kubectl", "-n", "nr1-system", "patch", "servicemonitor", "nr1-agent", "--type=json",
		"-p", `[{"op":"replace","path":"/spec/endpoints/0/honorLabels","value":false}]`)
	// The operator's new configuration reaches Prometheus through a Secret the kubelet
	// refreshes in the pod's volume at its own pace, a minute or more.
	patched := time.Now()
	eventually(t, 4*time.Minute, "the CG's labels overwritten without honorLabels", func() error {
		got, err := promQuery(prom, `nr1_usage_queues{exported_namespace="`+exempt.Namespace+`",exported_pod="`+exempt.Name+`",pod="`+agent.Name+`"}`)
		if err == nil && len(got) == 0 {
			err = errors.New("no series")
		}
		return err
	})
	t.Logf("without honorLabels, the CG's series named the agent's pod %s after the patch", time.Since(patched).Round(time.Second))

	h.replace(t, "the rollback", registry+"/nr1-agent:"+old, func() {
		run(t, "helm", "rollback", "nr1-agent", "--namespace", "nr1-system", "--wait", "--timeout", "3m")
	})

	// What the agent kept on the node is there until the uninstall, and gone after it.
	pin := filepath.Join("/sys/fs/bpf/nr1-agent/throttle", string(over.UID))
	if _, err := os.Stat(pin); err != nil {
		t.Errorf("the throttle's pin before the uninstall: %v", err)
	}
	run(t, "helm", "uninstall", "nr1-agent", "--namespace", "nr1-system", "--wait")
	eventually(t, 2*time.Minute, "nothing of the agent's left on the node", func() error {
		switch _, err := os.Stat("/sys/fs/bpf/nr1-agent"); {
		case err == nil:
			return errors.New("/sys/fs/bpf/nr1-agent is still there")
		case !errors.Is(err, os.ErrNotExist):
			return err
		}
		left, err := os.ReadDir("/var/lib/nr1-agent")
		switch {
		case err != nil && !errors.Is(err, os.ErrNotExist):
			return err
		case len(left) > 0:
			return fmt.Errorf("/var/lib/nr1-agent holds %v", left)
		}
		return nil
	})
	for _, o := range []string{"daemonset/nr1-agent", "servicemonitor/nr1-agent", "prometheusrule/nr1-agent"} {
		if out, err := runErr("kubectl", "-n", "nr1-system", "get", o, "--ignore-not-found", "-o", "name"); err != nil || len(out) > 0 {
			t.Errorf("%s after the uninstall: %s %v", o, out, err)
		}
	}
}

// pulledFromTheRegistry is the ready agent, which must run image, pulled from its
// registry (its image ID, and the kubelet's Event).
func pulledFromTheRegistry(t *testing.T, c kubernetes.Interface, image string) *corev1.Pod {
	t.Helper()
	agent := mustReadyAgent(t, c)
	if got := agent.Spec.Containers[0].Image; got != image {
		t.Errorf("the agent runs %s, want the released %s", got, image)
	}
	repository := image[:strings.LastIndex(image, ":")]
	for _, s := range agent.Status.ContainerStatuses {
		if !strings.HasPrefix(s.ImageID, repository+"@sha256:") {
			t.Errorf("container %s's image %s, not pulled from %s", s.Name, s.ImageID, repository)
		}
	}
	evs, err := c.CoreV1().Events("nr1-system").List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + agent.Name})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	pulled := false
	for _, ev := range evs.Items {
		pulled = pulled || (ev.Reason == "Pulled" && strings.Contains(ev.Message, "Successfully pulled image \""+image+"\""))
	}
	if !pulled {
		t.Errorf("no Event says the kubelet pulled %s: %v", image, reasons(evs.Items))
	}
	return agent
}

// grepLines are the lines of s that contain what.
func grepLines(s, what string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, what) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
