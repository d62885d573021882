// SPDX-License-Identifier: Apache-2.0

// Command kubectl-nr1 is the kubectl plugin for NR1 nodes (`kubectl nr1`): what each CG
// was given and holds (top), a CG's pod spec from the toolchain's resources.yaml
// (inject), and a CG's enforcement story (explain). It reads nr1-agent through the API
// server with the caller's kubeconfig.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	resourcev1client "k8s.io/client-go/kubernetes/typed/resource/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/neureality-sdk/nr1-agent/cli/agents"
)

var version = "dev"

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
}

// client is the core API group's client (pods, their proxy, Events); the full
// clientset would add every other group's client to the binary.
func (o *options) client() (corev1client.CoreV1Interface, error) {
	cfg, err := o.config.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	cfg.UserAgent = "kubectl-nr1/" + version
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
	cfg.UserAgent = "kubectl-nr1/" + version
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
	o := &options{in: in, out: out, errOut: errOut, now: time.Now}
	root := &cobra.Command{
		Use:           "kubectl-nr1",
		Short:         "NR1 compute graphs: what they were given, what they hold, what the agent did about it",
		Version:       version,
		SilenceUsage:  true,
		SilenceErrors: true,
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl nr1"},
	}
	root.SetIn(in)
	root.SetOut(out)
	root.SetErr(errOut)
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
	root.AddCommand(newTop(o), newInject(o), newExplain(o))
	return root
}
