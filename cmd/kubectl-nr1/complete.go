// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/neureality-sdk/nr1-agent/nr1/manifest"
)

// completionTimeout bounds what one completion asks the API server: the shell waits
// for it, and no completion is better than a hung prompt.
const completionTimeout = 5 * time.Second

// The completions of the flags every command takes: the namespaces for -n and
// --agent-namespace, the kubeconfig's contexts for --context.
func (o *options) completeRoot(root *cobra.Command) {
	must(root.RegisterFlagCompletionFunc("namespace", o.completeNamespaces))
	must(root.RegisterFlagCompletionFunc("agent-namespace", o.completeNamespaces))
	must(root.RegisterFlagCompletionFunc("context", o.completeContexts))
}

func (o *options) completeTop(cmd *cobra.Command) {
	must(cmd.RegisterFlagCompletionFunc("node", o.completeNodes))
	must(cmd.RegisterFlagCompletionFunc("output", fixed(
		cobra.CompletionWithDesc("json", "the report as JSON"),
		cobra.CompletionWithDesc("yaml", "the report as YAML"),
		cobra.CompletionWithDesc("wide", "tables with ratios, modes and enforcement"),
	)))
	keys := make([]cobra.Completion, 0, len(sortKeys))
	for _, k := range sortKeys {
		keys = append(keys, cobra.CompletionWithDesc(k.name, k.help))
	}
	must(cmd.RegisterFlagCompletionFunc("sort-by", fixed(keys...)))
}

func completeInject(cmd *cobra.Command) {
	must(cmd.RegisterFlagCompletionFunc("mode", fixed(
		cobra.CompletionWithDesc(string(manifest.DevicePlugin), "requests and limits of one container"),
		cobra.CompletionWithDesc(string(manifest.DRA), "a ResourceClaimTemplate and the pod's claim"),
	)))
	must(cmd.MarkFlagFilename("filename", "yaml", "yml"))
	// The pod spec: a YAML or JSON file (or - for stdin), and only one.
	cmd.ValidArgsFunction = func(_ *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return []cobra.Completion{"yaml", "yml", "json"}, cobra.ShellCompDirectiveFilterFileExt
	}
}

// completePods completes explain's POD: the pods of -n's namespace, or the kubeconfig's.
func (o *options) completePods(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	c, err := o.client()
	if err != nil {
		return failed(err)
	}
	ns, err := o.namespace()
	if err != nil {
		return failed(err)
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), completionTimeout)
	defer cancel()
	pods, err := c.Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return failed(err)
	}
	names := make([]string, 0, len(pods.Items))
	for _, p := range pods.Items {
		names = append(names, p.Name)
	}
	return matching(names, toComplete), cobra.ShellCompDirectiveNoFileComp
}

// completeNodes completes --node with the nodes an agent runs on: those top can tell
// about, and found with what top needs (nr1-agent-reader), where listing nodes needs
// a cluster role operators may not have.
func (o *options) completeNodes(cmd *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	c, err := o.client()
	if err != nil {
		return failed(err)
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), completionTimeout)
	defer cancel()
	pods, err := o.source(c).Agents(ctx, "")
	if err != nil {
		return failed(err)
	}
	var nodes []string
	for _, p := range pods {
		if p.Spec.NodeName != "" {
			nodes = append(nodes, p.Spec.NodeName)
		}
	}
	return matching(nodes, toComplete), cobra.ShellCompDirectiveNoFileComp
}

func (o *options) completeNamespaces(cmd *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	c, err := o.client()
	if err != nil {
		return failed(err)
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), completionTimeout)
	defer cancel()
	list, err := c.Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return failed(err)
	}
	names := make([]string, 0, len(list.Items))
	for _, n := range list.Items {
		names = append(names, n.Name)
	}
	return matching(names, toComplete), cobra.ShellCompDirectiveNoFileComp
}

func (o *options) completeContexts(_ *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	cfg, err := o.config.RawConfig()
	if err != nil {
		return failed(err)
	}
	names := make([]string, 0, len(cfg.Contexts))
	for name := range cfg.Contexts {
		names = append(names, name)
	}
	return matching(names, toComplete), cobra.ShellCompDirectiveNoFileComp
}

// fixed completes a flag with choices, those starting with what was typed: as the
// other completions do, whatever the shell filters.
func fixed(choices ...cobra.Completion) cobra.CompletionFunc {
	return func(_ *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		var out []cobra.Completion
		for _, c := range choices {
			if strings.HasPrefix(c, toComplete) {
				out = append(out, c)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// matching are the names starting with what was typed, sorted: the shells show them
// as given.
func matching(names []string, prefix string) []cobra.Completion {
	var out []cobra.Completion
	for _, n := range names {
		if strings.HasPrefix(n, prefix) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// failed offers nothing: a completion has nowhere to say what went wrong but cobra's
// debug log ($BASH_COMP_DEBUG_FILE).
func failed(err error) ([]cobra.Completion, cobra.ShellCompDirective) {
	cobra.CompDebugln("kubectl nr1: "+err.Error(), true)
	return nil, cobra.ShellCompDirectiveNoFileComp
}

// must panics on a completion registered for a flag that does not exist: a mistake
// in this file, which every test of the commands finds.
func must(err error) {
	if err != nil {
		panic(err)
	}
}
