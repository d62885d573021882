// SPDX-License-Identifier: Apache-2.0

//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sigsyaml "sigs.k8s.io/yaml"
)

// TestInstallFromTheRegistry is a stranger's install: make release pushes the image and
// the chart to the stack's registry (CNCF distribution, TLS by the stack's CA, which the
// runtime trusts as a cluster trusts its registry's); the README's helm install from
// oci:// installs the chart, whose image the runtime pulls from there, and the agent so
// installed acts on a CG going over.
func TestInstallFromTheRegistry(t *testing.T) {
	registry, ca := os.Getenv("NR1_REGISTRY"), os.Getenv("NR1_REGISTRY_CA")
	if registry == "" || ca == "" {
		t.Fatal("NR1_REGISTRY and NR1_REGISTRY_CA unset: run under make e2e, or after eval $(deploy/local/stack.sh env)")
	}
	c := client(t)
	version := strings.TrimSpace(string(run(t, "make", "-s", "-C", repo, "version")))
	out := run(t, "make", "-s", "-C", repo, "release", "REGISTRY="+registry, "REGISTRY_CA="+ca)
	chartVersion := strings.TrimPrefix(version, "v")
	if !strings.Contains(string(out), "chart oci://"+registry+"/charts/nr1-agent --version "+chartVersion) {
		t.Fatalf("make release said:\n%s", out)
	}

	// What the stack's simulated NR1 needs of the configuration, without the stack's
	// image: the chart's own, from the registry.
	b, err := os.ReadFile(filepath.Join(repo, "deploy", "helm", "nr1-agent", "values-local.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var local map[string]any
	if err := sigsyaml.Unmarshal(b, &local); err != nil {
		t.Fatal(err)
	}
	delete(local, "image")
	delete(local, "namespace")
	b, err = sigsyaml.Marshal(local)
	if err != nil {
		t.Fatal(err)
	}
	values := filepath.Join(t.TempDir(), "stack.yaml")
	writeFile(t, values, b)

	makeWayForARelease(t, c)
	// As the README says it; pulled always, since a stack left up may hold the image
	// from an earlier run.
	run(t, "helm", append([]string{"install", "nr1-agent", "oci://" + registry + "/charts/nr1-agent", "--version", chartVersion,
		"--namespace", "nr1-system", "--create-namespace", "--ca-file", ca, "-f", values, "--set", "image.pullPolicy=Always",
		"--wait", "--timeout", "3m"}, runtimeValues()...)...)
	agent := mustReadyAgent(t, c)

	want := registry + "/nr1-agent:" + version
	if got := agent.Spec.Containers[0].Image; got != want {
		t.Errorf("the agent runs %s, want the released %s", got, want)
	}
	for _, s := range agent.Status.ContainerStatuses {
		if !strings.HasPrefix(s.ImageID, registry+"/nr1-agent@sha256:") {
			t.Errorf("container %s's image %s, not pulled from %s", s.Name, s.ImageID, registry)
		}
	}
	evs, err := c.CoreV1().Events("nr1-system").List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + agent.Name})
	if err != nil {
		t.Fatal(err)
	}
	pulled := false
	for _, ev := range evs.Items {
		pulled = pulled || (ev.Reason == "Pulled" && strings.Contains(ev.Message, "Successfully pulled image \""+want+"\""))
	}
	if !pulled {
		t.Errorf("no Event says the kubelet pulled %s: %v", want, reasons(evs.Items))
	}

	// The agent says what it was built from: this checkout's commit.
	head := strings.TrimSpace(string(run(t, "git", "-C", repo, "rev-parse", "HEAD")))
	if _, body, err := getMetrics(agent.Status.PodIP); err != nil || !strings.Contains(body, `revision="`+head) || !strings.Contains(body, `version="`+version+`"`) {
		t.Errorf("nr1_build_info does not name version %s, revision %s: %v\n%s", version, head, err, grepLines(body, "nr1_build_info"))
	}

	time.Sleep(12 * time.Second) // the enforcement warm-up (10 s) after a start
	over := running(t, c, createPod(t, c, loadPod("registry-over", "--compute-dma-mb=2", "--step=3s:compute=4")))
	waitReason(t, c, over, "NR1Throttled", 40*time.Second)
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
