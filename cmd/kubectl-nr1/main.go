// SPDX-License-Identifier: Apache-2.0

// Command kubectl-nr1 is the kubectl plugin for NR1 nodes (`kubectl nr1`): what each CG
// was given and holds (top), a CG's pod spec from the toolchain's resources.yaml
// (inject), and a CG's enforcement story (explain). It reads nr1-agent through the API
// server with the caller's kubeconfig. kubectl completes its arguments through
// kubectl_complete-nr1, which asks cobra's __complete command.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	resourcev1client "k8s.io/client-go/kubernetes/typed/resource/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/neureality-sdk/nr1-agent/cli/agents"
)

// version is the release's, set by the Makefile (-X main.version).
var version = "dev"

// buildVersion is the version this binary says it is: the Makefile's, or else that of
// the module go install built it from (v0.1.0, or a pseudo-version).
func buildVersion() string {
	if version != "dev" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return version
}

func main() {
	os.Exit(run())
}

// run returns the exit status: 2 for a command line that cannot be run, 1 for any
// other failure.
func run() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cmd := newRoot(os.Stdin, os.Stdout, os.Stderr)
	if err := cmd.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		var usage usageError
		if errors.As(err, &usage) {
			return 2
		}
		return 1
	}
	return 0
}

// usageError is a command line that cannot be run as written.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// options are what every command shares: the kubeconfig flags and where the agents run.
type options struct {
	config         clientcmd.ClientConfig
	agentNamespace string
	agentSelector  string
	in             io.Reader
	out, errOut    io.Writer
	now            func() time.Time
	// core, when set, is the client instead of the kubeconfig's: tests give a fake.
	core corev1client.CoreV1Interface
}

// client is the core API group's client (pods, their proxy, Events); the full
// clientset would add every other group's client to the binary.
func (o *options) client() (corev1client.CoreV1Interface, error) {
	if o.core != nil {
		return o.core, nil
	}
	cfg, err := o.config.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	cfg.UserAgent = "kubectl-nr1/" + buildVersion()
	c, err := corev1client.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	return c, nil
}

// claims is the resource API group's client, for a DRA CG's claims.
func (o *options) claims() (resourcev1client.ResourceV1Interface, error) {
	cfg, err := o.config.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	cfg.UserAgent = "kubectl-nr1/" + buildVersion()
	c, err := resourcev1client.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	return c, nil
}

// namespace is -n, or the kubeconfig context's namespace.
func (o *options) namespace() (string, error) {
	ns, _, err := o.config.Namespace()
	if err != nil {
		return "", fmt.Errorf("kubeconfig: %w", err)
	}
	return ns, nil
}

func (o *options) source(c corev1client.CoreV1Interface) agents.Source {
	return agents.Source{Pods: c, Namespace: o.agentNamespace, Selector: o.agentSelector}
}

func newRoot(in io.Reader, out, errOut io.Writer) *cobra.Command {
	return newRootFor(&options{in: in, out: out, errOut: errOut, now: time.Now})
}

func newRootFor(o *options) *cobra.Command {
	root := &cobra.Command{
		Use:   "kubectl-nr1",
		Short: "NR1 compute graphs: what they were given, what they hold, what the agent did about it",
		Example: `  # Every NR1 node and the CGs of every namespace, the most over first
  kubectl nr1 top -A

  # A CG's enforcement story: allocation, usage, the agent's Events, what happens next
  kubectl nr1 explain -n ml hog

  # A CG's pod spec with its NR1 resources, applied
  kubectl nr1 inject -f resources.yaml pod.yaml | kubectl apply -f -`,
		Version:       buildVersion(),
		SilenceUsage:  true,
		SilenceErrors: true,
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl nr1"},
	}
	root.SetIn(o.in)
	root.SetOut(o.out)
	root.SetErr(o.errOut)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	// kubectl's own flags (--kubeconfig, --context, -n, --server, --token, …) and
	// loading rules ($KUBECONFIG, ~/.kube/config, in-cluster).
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	root.PersistentFlags().StringVar(&rules.ExplicitPath, clientcmd.RecommendedConfigPathFlag, "", "path to the kubeconfig file")
	overrides := &clientcmd.ConfigOverrides{}
	clientcmd.BindOverrideFlags(overrides, root.PersistentFlags(), clientcmd.RecommendedConfigOverrideFlags(""))
	o.config = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	root.PersistentFlags().StringVar(&o.agentNamespace, "agent-namespace", agents.DefaultNamespace, "namespace of the nr1-agent pods")
	root.PersistentFlags().StringVar(&o.agentSelector, "agent-selector", agents.DefaultSelector, "label selector of the nr1-agent pods")
	root.AddCommand(newTop(o), newInject(o), newExplain(o), newVersion(o))
	o.completeRoot(root)
	withExamples(root)
	return root
}

func newVersion(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the plugin's version",
		Long: `Prints the plugin's version alone (v0.1.0 for a release, v0.1.0-dev.<commit> for a
build between releases), for scripts; --version prints it as "kubectl nr1 version …".`,
		Example:           `  kubectl nr1 version`,
		Args:              cobra.NoArgs,
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintln(o.out, buildVersion())
			return err //nolint:wrapcheck // the command's output
		},
	}
}

// withExamples adds cobra's own commands (help, completion and its shells) now rather
// than when the command runs, so that each has an example in its help like the others.
func withExamples(root *cobra.Command) {
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		switch c.Name() {
		case "help":
			c.Example = `  kubectl nr1 help top`
		case "completion":
			c.Long += `
kubectl (1.26 and later) completes "kubectl nr1 …" itself when kubectl_complete-nr1,
from the release archive, is on the PATH; these scripts complete kubectl-nr1 run by
its own name.`
			c.Example = `  # kubectl nr1's completion: the helper beside the plugin, onto the PATH
  install -m 0755 kubectl_complete-nr1 ~/.local/bin/

  # kubectl-nr1's own, in this bash
  source <(kubectl-nr1 completion bash)`
			for _, shell := range c.Commands() {
				shell.Example = completionExample(shell.Name())
			}
		}
	}
}

func completionExample(shell string) string {
	switch shell {
	case "bash":
		return `  source <(kubectl-nr1 completion bash)`
	case "zsh":
		return `  kubectl-nr1 completion zsh > "${fpath[1]}/_kubectl-nr1"`
	case "fish":
		return `  kubectl-nr1 completion fish > ~/.config/fish/completions/kubectl-nr1.fish`
	case "powershell":
		return `  kubectl-nr1 completion powershell | Out-String | Invoke-Expression`
	}
	return ""
}
