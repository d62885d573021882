// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"

	"github.com/neureality-sdk/nr1-agent/agent/config"
	"github.com/neureality-sdk/nr1-agent/agent/kube"
	"github.com/neureality-sdk/nr1-agent/agent/offer/nodelabels"
)

// labelRecheck is how often the node's labels are looked at again, for someone may have
// edited them.
const labelRecheck = 5 * time.Minute

// modeReadTimeout bounds how long startup waits for the node's mode label.
const modeReadTimeout = 5 * time.Second

// nodeName is the node the agent runs on: the configured one, else the host's name.
func nodeName(cfg *config.Config) string {
	if cfg.NodeName != "" {
		return cfg.NodeName
	}
	h, _ := os.Hostname()
	return h
}

// ourNode is the agent's Node in the API server, or nil without one (a standalone
// kubelet) or when neither its mode label nor its labels are wanted.
func ourNode(cfg *config.Config, api *kube.API) *kube.Node {
	if api == nil || cfg.Node.ModeLabel == "" && !cfg.Node.Labels {
		return nil
	}
	return api.Node(nodeName(cfg))
}

// labelled is a node whose labels can be read.
type labelled interface {
	Labels(ctx context.Context) (map[string]string, error)
}

// selectMode returns cfg with the mode the node's label selects, when it selects one:
// the label's value as the API server has it, else, when the node's labels cannot be
// read, the value this node's agent last read, kept in its state directory. A value that
// is not a mode is logged and the configured mode kept.
func selectMode(cfg *config.Config, node labelled, log *slog.Logger) *config.Config {
	if node == nil || cfg.Node.ModeLabel == "" {
		return cfg
	}
	remembered := nodelabels.Remembered{Path: filepath.Join(cfg.Paths.State, "mode")}
	ctx, cancel := context.WithTimeout(context.Background(), modeReadTimeout)
	defer cancel()
	var selected string
	labels, err := readLabels(ctx, node)
	if err == nil {
		selected, err = nodelabels.Selected(labels, cfg.Node.ModeLabel)
		if err != nil {
			log.Warn("the node's mode label is ignored", "err", err, "mode", cfg.Mode)
		}
		if err := remembered.Store(selected); err != nil {
			log.Warn("the node's mode not remembered for a restart without the API server", "err", err)
		}
	} else {
		last, lerr := remembered.Load()
		log.Warn("the node's labels could not be read: the mode its label last selected is kept",
			"label", cfg.Node.ModeLabel, "err", err, "mode", last, "rememberErr", lerr)
		selected = last
	}
	if selected == "" || selected == cfg.Mode {
		return cfg
	}
	log.Info("the node's label selects the mode", "label", cfg.Node.ModeLabel, "mode", selected, "configured", cfg.Mode)
	c := *cfg
	c.Mode = selected
	return &c
}

// readLabels reads the node's labels, trying again every second until ctx ends while the
// API server does not answer; an answer that will not change (no such node, not
// allowed) is returned at once, so that it holds up no agent's start. It runs once, at
// start, before the agent's clock drives anything: wait's own clock times it.
func readLabels(ctx context.Context, node labelled) (labels map[string]string, err error) {
	polled := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		labels, err = node.Labels(ctx)
		return err == nil || apierrors.IsNotFound(err) || apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err), nil
	})
	if err == nil && polled != nil {
		err = polled
	}
	return labels, err
}

// labelPublisher keeps the node labelled with what the agent found, or is nil when it
// is not to.
func labelPublisher(cfg *config.Config, node *kube.Node, dev *theNR1, gateRuns bool, clk clock.Clock, log *slog.Logger) *nodelabels.Publisher {
	if node == nil || !cfg.Node.Labels {
		return nil
	}
	want := nodelabels.Found(cfg.Mode, dev.capacity, dev.inv.DriverVersion())
	switch {
	case gateRuns:
		want[nodelabels.PreventionLabel] = "on"
	case cfg.Prevention.Enabled:
		want[nodelabels.PreventionLabel] = "unavailable"
	default:
		want[nodelabels.PreventionLabel] = "off"
	}
	return &nodelabels.Publisher{Node: node, Want: want, Recheck: labelRecheck, Clock: clk, Log: log}
}
