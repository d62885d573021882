// SPDX-License-Identifier: Apache-2.0

// Package config is the agent's configuration: a versioned YAML file, flags and their
// NR1_AGENT_* environment twins, with precedence flag > env > file > default.
package config

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/neureality-sdk/nr1-agent/agent/act/enforce"
	"github.com/neureality-sdk/nr1-agent/nr1/device"
)

// The only apiVersion and kind the agent reads.
const (
	APIVersion = "nr1.neureality.ai/v1alpha1"
	Kind       = "AgentConfig"
)

// Config is the agent's whole configuration.
type Config struct {
	APIVersion string `json:"apiVersion" enum:"nr1.neureality.ai/v1alpha1"`
	Kind       string `json:"kind" enum:"AgentConfig"`
	// NodeName is the Kubernetes node the agent runs on; empty means the host name.
	NodeName string `json:"nodeName"`
	// Mode is how the NR1 is offered to the kubelet: devicePlugin (four extended
	// resources, one device per unit) or dra (one DRA device with four consumable
	// capacities, claimed through ResourceClaims). A node runs one or the other.
	Mode string `json:"mode" enum:"devicePlugin|dra"`
	// MetricsAddr is where /metrics, /healthz and /readyz are served.
	MetricsAddr string `json:"metricsAddr"`
	// DebugAddr is where /debug/cgs and /debug/pprof are served: the node's processes,
	// cgroups and CGs, and the agent's profiles, so on the pod's loopback by default,
	// reached with kubectl port-forward. Empty serves no debug endpoint.
	DebugAddr    string         `json:"debugAddr"`
	Paths        Paths          `json:"paths"`
	Log          Log            `json:"log"`
	DevicePlugin DevicePlugin   `json:"devicePlugin"`
	Runtime      Runtime        `json:"runtime"`
	Sampling     Sampling       `json:"sampling"`
	Enforcement  enforce.Policy `json:"enforcement"`
	Prevention   Prevention     `json:"prevention"`
	// Kubeconfig reaches the API server from outside a cluster; empty uses the pod's
	// service account. Without an API server, Events and evictions are only logged.
	Kubeconfig string        `json:"kubeconfig"`
	NR1        device.Config `json:"nr1"`
	Node       Node          `json:"node"`
}

// Node configures what the agent reads and writes on its Node object.
type Node struct {
	// ModeLabel is the node label whose value, devicePlugin or dra, chooses the node's
	// mode over Mode, so that a cluster moves from one mode to the other node by node;
	// empty leaves the choice to Mode alone.
	ModeLabel string `json:"modeLabel"`
	// Labels has the agent label its node with what it found: the mode it runs in, each
	// resource's capacity and the NR1 driver's version (neureality.ai/nr1.*).
	Labels bool `json:"labels"`
}

// Prevention configures the budget gate: a program in the kernel that refuses an open
// of an NR1 queue device by a CG already holding every queue it booked, so that it never
// holds more. The enforcement ladders stay for what the gate cannot see.
type Prevention struct {
	// Enabled loads the gate; a node whose kernel refuses it runs without, and says so.
	Enabled bool `json:"enabled"`
	// Unknown is what the gate does with an open by a pod whose booking it does not know
	// yet (between the pod's start and the agent's first sample of it, or any pod while
	// the agent is away before its first sample): allow it, uncounted until the next
	// sample settles the pod's count, or refuse it (EPERM).
	Unknown string `json:"unknown" enum:"allow|refuse"`
}

// Runtime configures the CRI watcher.
type Runtime struct {
	// Endpoint is the CRI socket, e.g. unix:///run/containerd/containerd.sock; empty
	// detects containerd or CRI-O at their standard sockets.
	Endpoint string `json:"endpoint"`
	// Resync is how often the full container list is read besides events.
	Resync Duration `json:"resync"`
}

// Sampling configures how often the node is measured.
type Sampling struct {
	// Interval is how often every CG is measured, or, with OnChange, while a ladder is
	// under way, through warm-ups, or while a CG's allocation, usage or namespace labels
	// are not known.
	Interval Duration `json:"interval"`
	// IdleInterval is how often every CG is measured with OnChange otherwise: what takes
	// more of an NR1 file wakes the sampler at once, a ladder that starts keeps it at
	// Interval, and the rest (a holding passed between processes or moved between
	// cgroups) is seen within IdleInterval.
	IdleInterval Duration `json:"idleInterval"`
	// PartitionInterval is how often the docker partition (images and writable layers)
	// is measured through CRI.
	PartitionInterval Duration `json:"partitionInterval"`
	// Source is the footprint source: auto (BPF when it loads, else procfs), bpf or procfs.
	Source string `json:"source" enum:"auto|bpf|procfs"`
	// OnChange samples at once when a process opens or maps an NR1 file, as the kernel
	// reports it (the BPF source's syscall tracepoints), not only every interval.
	OnChange bool `json:"onChange"`
	// ChangeGap is the least time between two samples a change starts: what a process
	// opening and closing an NR1 file in a loop can cost the node.
	ChangeGap Duration `json:"changeGap"`
	// AllocationRefresh is how often the kubelet's whole pod-resources table is read at
	// least. It is also read when the runtime starts a pod the table lacks, and while
	// reads fail; otherwise, just before each sample, the kubelet is asked about one pod
	// (the age of its last answer is what enforcement.maxAllocationAge bounds), so at rest
	// it is asked once an idle interval. A pod's allocation does not change while it
	// runs, so the table need not be read whole every interval: that is a megabyte and
	// more once a node's capacity is allocated. 0s reads it every interval.
	AllocationRefresh Duration `json:"allocationRefresh"`
}

// Paces are the intervals of the stages that keep the samples' pace, derived here from
// Interval and nowhere else: a sample is only as fresh as what it joins.
type Paces struct {
	// RuntimePoll is how often a runtime without container events is listed.
	RuntimePoll time.Duration
	// AllocationRead is how often the kubelet is read (its table, or one pod asked
	// about) while it must be (a read failing, a pod not in its table), and the deadline
	// of one question: a kubelet that takes longer does not answer, and the allocations
	// start aging.
	AllocationRead time.Duration
	// AllocationRest is how long the kubelet's reads rest otherwise: each sample has it
	// vouch for the table, so they wait only for the whole table's refresh.
	AllocationRest time.Duration
	// VouchWait is how long a sample waits for the kubelet to vouch for the table: a
	// kubelet that stops answering delays a sample by no more than a change may.
	VouchWait time.Duration
	// VouchFresh is how young the kubelet's last answer vouches for a sample as it is,
	// without waiting for the next: within an interval, as the samples at rest are.
	VouchFresh time.Duration
	// ScanTimeout bounds one footprint scan: a scan that takes an interval is cut
	// short, and what it did not read is uncertain.
	ScanTimeout time.Duration
}

// Paces derives the stages' paces from the sampling interval.
func (s Sampling) Paces() Paces {
	rest := s.Interval.Duration
	if s.AllocationRefresh.Duration > rest {
		rest = s.AllocationRefresh.Duration
	}
	return Paces{RuntimePoll: s.Interval.Duration, AllocationRead: s.Interval.Duration, AllocationRest: rest,
		VouchWait: s.ChangeGap.Duration, VouchFresh: s.Interval.Duration, ScanTimeout: s.Interval.Duration}
}

// Paths are the host roots the agent reads, so tests and containers can move them.
type Paths struct {
	Procfs string `json:"procfs"`
	Sysfs  string `json:"sysfs"`
	// Dev is where the host's /dev is mounted in the agent's container: NR1 files are
	// configured by their host paths (what the kubelet gives containers), and the agent
	// finds those in /dev under Dev. A device created after the agent started is seen
	// there, not in the container's own /dev.
	Dev      string `json:"dev"`
	Kubelet  string `json:"kubelet"`
	Cgroupfs string `json:"cgroupfs"`
	// CDI is the runtime's CDI spec directory, where DRA mode writes a spec per claim.
	CDI string `json:"cdi"`
	// Bpffs is where throttles are pinned, so that they outlive the agent.
	Bpffs string `json:"bpffs"`
	// State is the agent's own directory on the host (a hostPath), where what
	// enforcement did is checkpointed across the agent's restarts.
	State string `json:"state"`
}

// Log configures the structured logger.
type Log struct {
	Level  string `json:"level" enum:"debug|info|warn|error"`
	Format string `json:"format" enum:"json|text"`
}

// DevicePlugin configures the kubelet device plugins.
type DevicePlugin struct {
	// HealthInterval is how often the NR1's health is probed.
	HealthInterval Duration `json:"healthInterval"`
	// Resync bounds how long a missed change of the kubelet's sockets goes unnoticed.
	Resync Duration `json:"resync"`
}

// The modes: how the NR1 is offered to the kubelet.
const (
	ModeDevicePlugin = "devicePlugin"
	ModeDRA          = "dra"
)

// Duration is a time.Duration written as "5s" in the configuration file.
type Duration = metav1.Duration

// Default is the configuration with nothing set.
func Default() Config {
	return Config{
		APIVersion:  APIVersion,
		Kind:        Kind,
		MetricsAddr: ":9470",
		DebugAddr:   "127.0.0.1:9471",
		Mode:        ModeDevicePlugin,
		Paths:       Paths{Procfs: "/proc", Sysfs: "/sys", Dev: "/dev", Kubelet: "/var/lib/kubelet", Cgroupfs: "/sys/fs/cgroup", CDI: "/var/run/cdi", Bpffs: "/sys/fs/bpf", State: "/var/lib/nr1-agent"},
		Log:         Log{Level: "info", Format: "json"},
		DevicePlugin: DevicePlugin{
			HealthInterval: Duration{Duration: 5 * time.Second},
			Resync:         Duration{Duration: 5 * time.Second},
		},
		Runtime: Runtime{Resync: Duration{Duration: 30 * time.Second}},
		Sampling: Sampling{Interval: Duration{Duration: time.Second}, IdleInterval: Duration{Duration: 10 * time.Second}, PartitionInterval: Duration{Duration: 10 * time.Second}, Source: "auto",
			OnChange: true, ChangeGap: Duration{Duration: 50 * time.Millisecond}, AllocationRefresh: Duration{Duration: 5 * time.Minute}},
		Enforcement: enforce.DefaultPolicy(),
		NR1:         device.DefaultConfig(),
		Node:        Node{ModeLabel: "nr1.neureality.ai/mode", Labels: true},
		Prevention:  Prevention{Unknown: UnknownAllow},
	}
}

// The policies for an open by a pod the gate has no booking of.
const (
	UnknownAllow  = "allow"
	UnknownRefuse = "refuse"
)

// ThrottlePins is the bpffs directory holding the pinned throttles.
func (c *Config) ThrottlePins() string { return filepath.Join(c.Paths.Bpffs, "nr1-agent", "throttle") }

// GatePins is the bpffs directory holding the budget gate's maps and links.
func (c *Config) GatePins() string { return filepath.Join(c.Paths.Bpffs, "nr1-agent", "gate") }

// EnforcementCheckpoint is the file holding the enforcement state.
func (c *Config) EnforcementCheckpoint() string {
	return filepath.Join(c.Paths.State, "enforcement.json")
}

// PodResourcesSocket is the kubelet's pod-resources API socket.
func (c *Config) PodResourcesSocket() string {
	return filepath.Join(c.Paths.Kubelet, "pod-resources", "kubelet.sock")
}

// DevicePluginsDir is the kubelet's device-plugins directory.
func (c *Config) DevicePluginsDir() string { return filepath.Join(c.Paths.Kubelet, "device-plugins") }

// Validate reports every invalid field, each with its name and the reason.
func (c *Config) Validate() error {
	var errs []error
	field := func(name, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{name}, args...)...))
	}
	if c.APIVersion != APIVersion {
		field("apiVersion", "must be %q, got %q", APIVersion, c.APIVersion)
	}
	if c.Kind != Kind {
		field("kind", "must be %q, got %q", Kind, c.Kind)
	}
	if _, _, err := net.SplitHostPort(c.MetricsAddr); err != nil {
		field("metricsAddr", "must be host:port, got %q", c.MetricsAddr)
	}
	if c.Mode != ModeDevicePlugin && c.Mode != ModeDRA {
		field("mode", "must be %s or %s, got %q", ModeDevicePlugin, ModeDRA, c.Mode)
	}
	if c.Node.ModeLabel != "" {
		if errs := validation.IsQualifiedName(c.Node.ModeLabel); len(errs) > 0 {
			field("node.modeLabel", "must be a label key, got %q: %s", c.Node.ModeLabel, strings.Join(errs, "; "))
		}
	}
	if c.DebugAddr != "" {
		if _, _, err := net.SplitHostPort(c.DebugAddr); err != nil {
			field("debugAddr", "must be host:port or empty, got %q", c.DebugAddr)
		}
	}
	for name, p := range map[string]string{"paths.procfs": c.Paths.Procfs, "paths.sysfs": c.Paths.Sysfs, "paths.dev": c.Paths.Dev, "paths.kubelet": c.Paths.Kubelet, "paths.cgroupfs": c.Paths.Cgroupfs, "paths.bpffs": c.Paths.Bpffs, "paths.state": c.Paths.State, "paths.cdi": c.Paths.CDI} {
		if !filepath.IsAbs(p) {
			field(name, "must be an absolute path, got %q", p)
		}
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		field("log.level", "must be one of debug, info, warn, error; got %q", c.Log.Level)
	}
	if c.Log.Format != "json" && c.Log.Format != "text" {
		field("log.format", "must be json or text, got %q", c.Log.Format)
	}
	if c.DevicePlugin.HealthInterval.Duration <= 0 {
		field("devicePlugin.healthInterval", "must be positive, got %s", c.DevicePlugin.HealthInterval.Duration)
	}
	if c.DevicePlugin.Resync.Duration <= 0 {
		field("devicePlugin.resync", "must be positive, got %s", c.DevicePlugin.Resync.Duration)
	}
	if e := c.Runtime.Endpoint; e != "" && !strings.HasPrefix(e, "unix:///") {
		field("runtime.endpoint", "must be unix:///path/to/socket, got %q", e)
	}
	if c.Runtime.Resync.Duration <= 0 {
		field("runtime.resync", "must be positive, got %s", c.Runtime.Resync.Duration)
	}
	if c.Sampling.Interval.Duration < 100*time.Millisecond {
		field("sampling.interval", "must be at least 100ms, got %s", c.Sampling.Interval.Duration)
	}
	if c.Enforcement.MaxAllocationAge.Duration <= c.Sampling.Interval.Duration {
		field("enforcement.maxAllocationAge", "must be longer than sampling.interval (%s), got %s: the kubelet is asked at that interval", c.Sampling.Interval.Duration, c.Enforcement.MaxAllocationAge.Duration)
	}
	if c.Enforcement.MaxPartitionAge.Duration <= c.Sampling.PartitionInterval.Duration {
		field("enforcement.maxPartitionAge", "must be longer than sampling.partitionInterval (%s), got %s", c.Sampling.PartitionInterval.Duration, c.Enforcement.MaxPartitionAge.Duration)
	}
	if c.Sampling.IdleInterval.Duration < c.Sampling.Interval.Duration {
		field("sampling.idleInterval", "must be at least sampling.interval (%s), got %s", c.Sampling.Interval.Duration, c.Sampling.IdleInterval.Duration)
	}
	if c.Sampling.ChangeGap.Duration <= 0 || c.Sampling.ChangeGap.Duration > c.Sampling.Interval.Duration {
		field("sampling.changeGap", "must be positive and at most sampling.interval (%s), got %s", c.Sampling.Interval.Duration, c.Sampling.ChangeGap.Duration)
	}
	if r := c.Sampling.AllocationRefresh.Duration; r != 0 && r < c.Sampling.Interval.Duration {
		field("sampling.allocationRefresh", "must be 0s or at least sampling.interval (%s), got %s", c.Sampling.Interval.Duration, c.Sampling.AllocationRefresh.Duration)
	}
	if c.Sampling.PartitionInterval.Duration < c.Sampling.Interval.Duration {
		field("sampling.partitionInterval", "must be at least sampling.interval, got %s", c.Sampling.PartitionInterval.Duration)
	}
	switch c.Sampling.Source {
	case "auto", "bpf", "procfs":
	default:
		field("sampling.source", "must be auto, bpf or procfs; got %q", c.Sampling.Source)
	}
	if err := c.Enforcement.Validate("enforcement"); err != nil {
		errs = append(errs, err)
	}
	if u := c.Prevention.Unknown; u != UnknownAllow && u != UnknownRefuse {
		field("prevention.unknown", "must be %s or %s, got %q", UnknownAllow, UnknownRefuse, u)
	}
	if err := c.NR1.Validate("nr1"); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
