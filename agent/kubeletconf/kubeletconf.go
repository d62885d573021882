// SPDX-License-Identifier: Apache-2.0

// Package kubeletconf reads what the node's kubelet was told about its resource health
// (the feature gates that make it write one pod status entry per allocated device), from
// the kubelet's command line and configuration files as the host's /proc shows them.
package kubeletconf

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// ResourceHealthGate is the kubelet's feature gate for device health in pod status: on,
// the kubelet writes an entry per allocated device of every container into its status.
const ResourceHealthGate = "ResourceHealthStatus"

// ErrNoKubelet is no kubelet process on the host.
var ErrNoKubelet = errors.New("no kubelet process")

// Gates is what the kubelet was told of its feature gates: those set, by name, and where
// each was found.
type Gates struct {
	PID    int
	Values map[string]bool
	Source map[string]string
}

// Gate says whether name is set, and to what.
func (g *Gates) Gate(name string) (value, set bool) {
	value, set = g.Values[name]
	return value, set
}

// Read finds the kubelet among the processes of procRoot and reads its feature gates: its
// configuration file (--config), then the drop-in directory (--config-dir, in lexical
// order), then its --feature-gates flag, each overriding what came before, as the
// kubelet merges them.
func Read(procRoot string) (*Gates, error) {
	pid, err := kubeletPID(procRoot)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "cmdline"))
	if err != nil {
		return nil, fmt.Errorf("kubelet %d: %w", pid, err)
	}
	flags, gateFlags := parseFlags(strings.Split(strings.TrimRight(string(b), "\x00"), "\x00"))
	g := &Gates{PID: pid, Values: map[string]bool{}, Source: map[string]string{}}
	in := func(path string) string { return hostPath(procRoot, pid, path) }
	if path := flags["config"]; path != "" {
		if err := g.file(in(path), "--config "+path); err != nil {
			return nil, err
		}
	}
	if dir := flags["config-dir"]; dir != "" {
		entries, err := os.ReadDir(in(dir))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("kubelet's --config-dir %s: %w", dir, err)
		}
		names := make([]string, 0, len(entries))
		for _, e := range entries {
			if !e.IsDir() && strings.HasSuffix(e.Name(), ".conf") {
				names = append(names, e.Name())
			}
		}
		sort.Strings(names)
		for _, name := range names {
			if err := g.file(filepath.Join(in(dir), name), "--config-dir "+filepath.Join(dir, name)); err != nil {
				return nil, err
			}
		}
	}
	// Each --feature-gates given is merged over those before it.
	for _, v := range gateFlags {
		for kv := range strings.SplitSeq(v, ",") {
			if strings.TrimSpace(kv) == "" {
				continue
			}
			name, value, _ := strings.Cut(strings.TrimSpace(kv), "=")
			on, err := strconv.ParseBool(strings.TrimSpace(value))
			if name == "" || err != nil {
				return nil, fmt.Errorf("kubelet's --feature-gates %q: %q is not name=bool", v, kv)
			}
			g.Values[name], g.Source[name] = on, "--feature-gates"
		}
	}
	return g, nil
}

// file merges the featureGates of a KubeletConfiguration file.
func (g *Gates) file(path, source string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("kubelet's %s: %w", source, err)
	}
	var cfg struct {
		FeatureGates map[string]bool `json:"featureGates"`
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		return fmt.Errorf("kubelet's %s: %w", source, err)
	}
	for name, on := range cfg.FeatureGates {
		g.Values[name], g.Source[name] = on, source
	}
	return nil
}

// kubeletPID is the lowest PID whose command is the kubelet.
func kubeletPID(procRoot string) (int, error) {
	entries, err := os.ReadDir(procRoot)
	if err != nil {
		return 0, fmt.Errorf("looking for the kubelet: %w", err)
	}
	best := 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile(filepath.Join(procRoot, e.Name(), "comm"))
		if err == nil && string(bytes.TrimSpace(comm)) == "kubelet" && (best == 0 || pid < best) {
			best = pid
		}
	}
	if best == 0 {
		return 0, ErrNoKubelet
	}
	return best, nil
}

// parseFlags reads --name=value and --name value flags; a flag given twice keeps the
// last, as the kubelet's flag parsing does, except --feature-gates, whose every value is
// returned in order: the kubelet merges them.
func parseFlags(args []string) (flags map[string]string, gates []string) {
	out := map[string]string{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !hasValue && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			value = args[i+1]
			i++
		}
		out[name] = value
		if name == "feature-gates" {
			gates = append(gates, value)
		}
	}
	return out, gates
}

// hostPath is path as the kubelet sees it: through its root, from its working directory
// when relative.
func hostPath(procRoot string, pid int, path string) string {
	base := filepath.Join(procRoot, strconv.Itoa(pid))
	if filepath.IsAbs(path) {
		return filepath.Join(base, "root", path)
	}
	return filepath.Join(base, "cwd", path)
}

// ResourceHealth says whether the kubelet writes resource health into pod statuses, and
// why that is thought: the gate as set for the kubelet, or else its default, on since
// Kubernetes 1.36 (the kubelet's version is not read: a gate not set counts as on).
func ResourceHealth(procRoot string) (on bool, why string) {
	g, err := Read(procRoot)
	if err != nil {
		return true, fmt.Sprintf("the kubelet's feature gates could not be read (%v), and %s is on by default since Kubernetes 1.36", err, ResourceHealthGate)
	}
	if on, set := g.Gate(ResourceHealthGate); set {
		return on, fmt.Sprintf("%s=%t in the kubelet's %s", ResourceHealthGate, on, g.Source[ResourceHealthGate])
	}
	return true, fmt.Sprintf("%s is not set for the kubelet, and is on by default since Kubernetes 1.36", ResourceHealthGate)
}
