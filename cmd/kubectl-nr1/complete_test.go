// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
)

// kubeconfig is a kubeconfig whose current context's namespace is ml.
const kubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: lab
  cluster: {server: "https://lab.invalid:6443"}
users:
- name: operator
  user: {token: not-a-secret}
contexts:
- name: lab
  context: {cluster: lab, user: operator, namespace: ml}
- name: prod
  context: {cluster: lab, user: operator}
current-context: lab
`

// cluster: three namespaces of CGs, and the agents of node-a and node-c beside a pod
// of nr1-system that is no agent (on node-z).
func cluster() *fake.Clientset {
	pod := func(ns, name, node string, labels map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}, Spec: corev1.PodSpec{NodeName: node}}
	}
	agent := map[string]string{"app.kubernetes.io/name": "nr1-agent"}
	var objs []runtime.Object
	for _, ns := range []string{"default", "ml", "nr1-system", "kube-system"} {
		objs = append(objs, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}
	objs = append(objs,
		pod("ml", "hog", "node-a", nil), pod("ml", "bert", "node-c", nil), pod("ml", "starting", "", nil),
		pod("default", "resnet50", "node-a", nil),
		pod("nr1-system", "nr1-agent-x7k2p", "node-a", agent), pod("nr1-system", "nr1-agent-c4t8w", "node-c", agent),
		pod("nr1-system", "debug", "node-z", nil))
	return fake.NewClientset(objs...)
}

// complete runs `kubectl-nr1 __complete args…` in-process, as kubectl_complete-nr1
// does, against the fake cluster: the completions offered (without their
// descriptions) and the directive.
func complete(t *testing.T, args ...string) ([]string, cobra.ShellCompDirective) {
	t.Helper()
	config := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(config, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	root := newRootFor(&options{out: &out, errOut: &errOut, now: time.Now, core: cluster().CoreV1()})
	root.SetArgs(append([]string{cobra.ShellCompRequestCmd, "--kubeconfig", config}, args...))
	if err := root.Execute(); err != nil {
		t.Fatalf("__complete %v: %v: %s", args, err, errOut.String())
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	last := lines[len(lines)-1]
	d, err := strconv.Atoi(strings.TrimPrefix(last, ":"))
	if !strings.HasPrefix(last, ":") || err != nil {
		t.Fatalf("__complete %v: no directive in %q", args, out.String())
	}
	var got []string
	for _, l := range lines[:len(lines)-1] {
		name, _, _ := strings.Cut(l, "\t")
		got = append(got, name)
	}
	return got, cobra.ShellCompDirective(d)
}

func TestCompletions(t *testing.T) {
	noFiles := cobra.ShellCompDirectiveNoFileComp
	for _, tc := range []struct {
		name      string
		args      []string
		want      []string
		directive cobra.ShellCompDirective
	}{
		{"explain: the pods of the kubeconfig's namespace", []string{"explain", ""}, []string{"bert", "hog", "starting"}, noFiles},
		{"explain: the pods of -n's", []string{"explain", "-n", "default", ""}, []string{"resnet50"}, noFiles},
		{"explain: -n before the command", []string{"-n", "default", "explain", ""}, []string{"resnet50"}, noFiles},
		{"explain: --namespace= and a prefix", []string{"explain", "--namespace=ml", "s"}, []string{"starting"}, noFiles},
		{"explain: one pod only", []string{"explain", "hog", ""}, nil, noFiles},
		{"top --node: the agents' nodes", []string{"top", "--node", ""}, []string{"node-a", "node-c"}, noFiles},
		{"top --node: of --agent-namespace", []string{"top", "--agent-namespace", "kube-system", "--node", ""}, nil, noFiles},
		{"-n: the namespaces", []string{"top", "-n", ""}, []string{"default", "kube-system", "ml", "nr1-system"}, noFiles},
		{"-n: a prefix", []string{"explain", "-n", "n"}, []string{"nr1-system"}, noFiles},
		{"--agent-namespace", []string{"top", "--agent-namespace", "k"}, []string{"kube-system"}, noFiles},
		{"--context: the kubeconfig's", []string{"top", "--context", ""}, []string{"lab", "prod"}, noFiles},
		{"top -o", []string{"top", "-o", ""}, []string{"json", "yaml", "wide"}, noFiles},
		{"top --sort-by", []string{"top", "--sort-by", ""}, sortKeyNames(), noFiles},
		{"top --sort-by ai", []string{"top", "--sort-by", "ai"}, []string{"ai_hypervisor", "ai_hypervisor_ratio"}, noFiles},
		{"top: no arguments", []string{"top", ""}, nil, noFiles},
		{"inject --mode", []string{"inject", "--mode", ""}, []string{"devicePlugin", "dra"}, noFiles},
		{"inject -f: YAML files", []string{"inject", "-f", ""}, []string{"yaml", "yml"}, cobra.ShellCompDirectiveFilterFileExt},
		{"inject POD.yaml: YAML or JSON files", []string{"inject", "-f", "r.yaml", ""}, []string{"yaml", "yml", "json"}, cobra.ShellCompDirectiveFilterFileExt},
		{"inject: one pod spec only", []string{"inject", "pod.yaml", ""}, nil, noFiles},
		{"version", []string{"version", ""}, nil, noFiles},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, d := complete(t, tc.args...)
			if !slices.Equal(got, tc.want) {
				t.Errorf("%v: offered %q, want %q", tc.args, got, tc.want)
			}
			if d != tc.directive {
				t.Errorf("%v: directive %d, want %d", tc.args, d, tc.directive)
			}
		})
	}
}

// The commands complete too, each named with its short help.
func TestCompletionOfCommands(t *testing.T) {
	got, _ := complete(t, "")
	for _, want := range []string{"top", "inject", "explain", "version", "completion"} {
		if !slices.Contains(got, want) {
			t.Errorf("offered %q, no %s", got, want)
		}
	}
}

// kubectl_complete-nr1 hands its words to the plugin beside it, or else to kubectl's.
func TestCompletionHelper(t *testing.T) {
	helper, err := filepath.Abs("kubectl_complete-nr1")
	if err != nil {
		t.Fatal(err)
	}
	script, err := os.ReadFile(helper)
	if err != nil {
		t.Fatal(err)
	}
	// echoes writes an executable that prints its name and arguments.
	echoes := func(path string) {
		t.Helper()
		if err := os.WriteFile(path, []byte("#!/bin/sh\necho \"$(basename \"$0\") $*\"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	run := func(dir string) string {
		t.Helper()
		copied := filepath.Join(dir, "kubectl_complete-nr1")
		if err := os.WriteFile(copied, script, 0o755); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(copied, "top", "-o", "")
		cmd.Env = append(os.Environ(), "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"))
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: %v", copied, err)
		}
		return string(out)
	}

	beside := t.TempDir()
	echoes(filepath.Join(beside, "kubectl-nr1"))
	if got, want := run(beside), "kubectl-nr1 __complete top -o \n"; got != want {
		t.Errorf("with the plugin beside it: ran %q, want %q", got, want)
	}
	alone, bin := t.TempDir(), t.TempDir()
	echoes(filepath.Join(bin, "kubectl"))
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	if got, want := run(alone), "kubectl nr1 __complete top -o \n"; got != want {
		t.Errorf("alone: ran %q, want %q", got, want)
	}
}
