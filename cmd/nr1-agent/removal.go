// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"bytes"
	"context"
	"log/slog"
	"time"

	"github.com/neureality-sdk/nr1-agent/agent/config"
	"github.com/neureality-sdk/nr1-agent/agent/kube"
)

// The agent's own pod, set by the manifests from the downward API. They are not
// configuration: no flag or file field sets them.
const (
	envPodNamespace = "NR1_AGENT_POD_NAMESPACE"
	envPodName      = "NR1_AGENT_POD_NAME"
)

// connect makes the agent's one connection to the API server, or says, once, what the
// agent does without one (a standalone kubelet): nil then.
func connect(cfg *config.Config, log *slog.Logger) *kube.API {
	api, err := kube.Connect(cfg.Kubeconfig)
	if err != nil {
		log.Warn("no Kubernetes API server: enforcement Events and evictions are only logged; only enforcement.exemptNamespaces "+
			"and enforcement.podExemptionNamespaces exempt; the node's labels are neither read nor written; throttles are not "+
			"lifted when the agent is removed; mode dra cannot run", "err", err)
		return nil
	}
	log.Info("kubernetes API client ready", "host", api.Host())
	return api
}

// watchRemoval follows the DaemonSet running the agent's pod until ctx ends; nil when the
// agent runs outside a pod or without an API server.
func watchRemoval(ctx context.Context, api *kube.API, getenv func(string) string, log *slog.Logger) *kube.Removal {
	ns, pod := getenv(envPodNamespace), getenv(envPodName)
	if ns == "" || pod == "" {
		log.Info("not run as a pod (" + envPodNamespace + ", " + envPodName + " unset): throttles are not lifted when the agent is removed")
		return nil
	}
	if api == nil {
		return nil
	}
	r := api.Removal(ns, pod, log)
	go r.Run(ctx)
	return r
}

// cleanupIfRemoved undoes what the agent did on this node once it has stopped, when its
// DaemonSet is being deleted. Otherwise throttles stay for the next agent to find.
func cleanupIfRemoved(r *kube.Removal, cfg *config.Config, log *slog.Logger) error {
	if r == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	removed, err := r.Removed(ctx)
	if err != nil {
		log.Warn("cannot tell whether the agent is being removed: throttles kept (if it is, run `nr1-agent cleanup` on this node)", "err", err)
		return nil
	}
	if !removed {
		return nil
	}
	log.Info("the agent's DaemonSet is deleted: undoing what the agent did on this node")
	var out bytes.Buffer
	err = cleanup(cfg, &out)
	for sc := bufio.NewScanner(&out); sc.Scan(); {
		log.Info("cleanup: " + sc.Text())
	}
	return err
}
