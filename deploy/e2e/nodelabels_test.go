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
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/neureality-sdk/nr1-agent/agent/offer/nodelabels"
	"github.com/neureality-sdk/nr1-agent/nr1"
)

// modeLabel is the label selecting a node's mode in the stack's configuration (the
// default of node.modeLabel).
const modeLabel = "nr1.neureality.ai/mode"

// nodeLabels waits for the agent's labels on the node to say mode, with the simulated
// NR1's capacities and its driver module's version, and returns the node's labels.
func nodeLabels(t *testing.T, c kubernetes.Interface, node, mode string) map[string]string {
	t.Helper()
	want := map[string]string{nodelabels.ModeLabel: mode}
	for _, r := range nr1.All {
		want[nodelabels.CapacityLabel(r)] = strconv.FormatInt(simCapacity[corev1.ResourceName(r.Name())], 10)
	}
	b, err := os.ReadFile(filepath.Join(simDir(), "sys", "module", "nr1", "version"))
	if err != nil {
		t.Fatalf("the simulated driver's version: %v", err)
	}
	want[nodelabels.DriverVersionLabel] = strings.TrimSpace(string(b))
	var labels map[string]string
	eventually(t, 60*time.Second, "the agent's labels on its node", func() error {
		n, err := c.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		labels = n.Labels
		for k, v := range want {
			if labels[k] != v {
				return fmt.Errorf("label %s=%q, want %q", k, labels[k], v)
			}
		}
		return nil
	})
	return labels
}

// The agent labels its node with what it found, and only with that: Node Feature
// Discovery's label and the others stay as they are.
func TestAgentLabelsItsNode(t *testing.T) {
	c := client(t)
	node := nodeName(t, c)
	labels := nodeLabels(t, c, node, "devicePlugin")
	if labels["neureality.ai/nr1"] != "true" {
		t.Errorf("the node's neureality.ai/nr1 label: %q", labels["neureality.ai/nr1"])
	}
	// A label of the agent's that someone removes is put back when the agent looks again
	// (every 5 minutes), so here after a restart.
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, nodelabels.DriverVersionLabel)
	if _, err := c.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	restartAgent(t, c)
	nodeLabels(t, c, node, "devicePlugin")
}

// The admission policy lets an agent change only its own node's neureality.ai/nr1.*
// labels, whatever its RBAC allows.
func TestNodeLabelsOnlyOwn(t *testing.T) {
	c := client(t)
	node := nodeName(t, c)
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		t.Fatal(err)
	}
	as := func(onNode string) kubernetes.Interface {
		cc := rest.CopyConfig(cfg)
		cc.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:nr1-system:nr1-agent",
			Extra: map[string][]string{"authentication.kubernetes.io/node-name": {onNode}}}
		kc, err := kubernetes.NewForConfig(cc)
		if err != nil {
			t.Fatal(err)
		}
		return kc
	}
	patch := func(k kubernetes.Interface, body string) error {
		_, err := k.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, []byte(body),
			metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	own := `{"metadata":{"labels":{"neureality.ai/nr1.mode":"dra"}}}`
	if err := patch(as(node), own); err != nil {
		t.Errorf("the agent of %s writing its own label (dry run): %v", node, err)
	}
	for what, c := range map[string]struct {
		onNode, body, want string
	}{
		"another node's labels":           {"elsewhere", own, "the agent on node elsewhere may not change node " + node},
		"Node Feature Discovery's label":  {node, `{"metadata":{"labels":{"neureality.ai/nr1":null}}}`, "only its own labels"},
		"the operator's mode label":       {node, `{"metadata":{"labels":{"` + modeLabel + `":"dra"}}}`, "only its own labels"},
		"the node's spec (unschedulable)": {node, `{"spec":{"unschedulable":true}}`, "not its spec or annotations"},
		"an annotation":                   {node, `{"metadata":{"annotations":{"nr1":"x"}}}`, "not its spec or annotations"},
	} {
		err := patch(as(c.onNode), c.body)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("the agent changing %s: %v, want refused: %s", what, err, c.want)
		}
	}
}

// The node's label chooses its mode over the configuration: a node labelled dra runs
// the DRA driver while the configuration says devicePlugin, and back once the label
// goes. The agent remembers the label's value for a restart without the API server.
func TestModeLabelMovesTheNode(t *testing.T) {
	c := client(t)
	node := nodeName(t, c)
	setLabel := func(value *string) {
		v := "null"
		if value != nil {
			v = strconv.Quote(*value)
		}
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%s}}}`, modeLabel, v)
		if _, err := c.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Registered first, run last: after the agent is back in device-plugin mode.
	t.Cleanup(func() { deleteNodeSlices(t, c, node) })
	t.Cleanup(func() { setLabel(nil); restartAgent(t, c) })

	dra := "dra"
	setLabel(&dra)
	restartAgent(t, c)
	nodeLabels(t, c, node, "dra")
	eventually(t, 30*time.Second, "the node's NR1 ResourceSlice", func() error {
		_, err := nodeSlice(c, node)
		return err
	})
	if b, err := os.ReadFile("/var/lib/nr1-agent/mode"); err != nil || strings.TrimSpace(string(b)) != "dra" {
		t.Errorf("the remembered mode: %q, %v", b, err)
	}

	setLabel(nil)
	restartAgent(t, c)
	nodeLabels(t, c, node, "devicePlugin")
	if _, err := os.Stat("/var/lib/nr1-agent/mode"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the mode still remembered after the label went: %v", err)
	}
}
