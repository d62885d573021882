// SPDX-License-Identifier: Apache-2.0

package config

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/neureality-sdk/nr1-agent/agent/act/enforce"
)

// option is one setting that a flag and its environment twin can set.
type option struct {
	name  string
	usage string
	set   func(c *Config, v string) error
}

func (o option) env() string { return EnvName(o.name) }

// EnvName is the environment twin of a flag: --path.sysfs is NR1_AGENT_PATH_SYSFS.
func EnvName(flagName string) string {
	return "NR1_AGENT_" + strings.ToUpper(strings.NewReplacer("-", "_", ".", "_").Replace(flagName))
}

const configFlag = "config"

var options = []option{
	{"node-name", "Kubernetes node this agent runs on (default: the host name)", setString(func(c *Config) *string { return &c.NodeName })},
	{"mode", "how the NR1 is offered to the kubelet: devicePlugin or dra", setString(func(c *Config) *string { return &c.Mode })},
	{"path.cdi", "the runtime's CDI spec directory (DRA mode)", setString(func(c *Config) *string { return &c.Paths.CDI })},
	{"metrics-addr", "address for /metrics, /healthz and /readyz", setString(func(c *Config) *string { return &c.MetricsAddr })},
	{"debug-addr", "address for /debug/cgs and /debug/pprof (loopback by default; empty: none)", setString(func(c *Config) *string { return &c.DebugAddr })},
	{"path.procfs", "host procfs root", setString(func(c *Config) *string { return &c.Paths.Procfs })},
	{"path.sysfs", "host sysfs root, where the NR1 driver's attributes are", setString(func(c *Config) *string { return &c.Paths.Sysfs })},
	{"path.dev", "where the host's /dev is mounted, to find the NR1 device files", setString(func(c *Config) *string { return &c.Paths.Dev })},
	{"path.kubelet", "kubelet root dir, holding device-plugins/, plugins/, plugins_registry/ and pod-resources/", setString(func(c *Config) *string { return &c.Paths.Kubelet })},
	{"path.cgroupfs", "host cgroupfs root", setString(func(c *Config) *string { return &c.Paths.Cgroupfs })},
	{"cri-endpoint", "CRI socket, unix:///...; empty detects containerd or CRI-O", setString(func(c *Config) *string { return &c.Runtime.Endpoint })},
	{"runtime.resync", "how often the full container list is read besides events", setDuration(func(c *Config) *Duration { return &c.Runtime.Resync })},
	{"sample-interval", "how often each CG's usage is measured", setDuration(func(c *Config) *Duration { return &c.Sampling.Interval })},
	{"sampling.source", "footprint source: auto, bpf or procfs", setString(func(c *Config) *string { return &c.Sampling.Source })},
	{"path.bpffs", "bpffs mount, where throttles are pinned", setString(func(c *Config) *string { return &c.Paths.Bpffs })},
	{"prevention.enabled", "refuse in the kernel an open of an NR1 queue past the CG's booking: true or false", setBool(func(c *Config) *bool { return &c.Prevention.Enabled })},
	{"prevention.unknown", "an open by a pod whose booking is not known yet: allow or refuse", setString(func(c *Config) *string { return &c.Prevention.Unknown })},
	{"path.state", "the agent's state directory on the host, where enforcement is checkpointed", setString(func(c *Config) *string { return &c.Paths.State })},
	{"kubeconfig", "kubeconfig for the API server; empty: in-cluster", setString(func(c *Config) *string { return &c.Kubeconfig })},
	{"enforcement.mode", "enforce or dry-run", func(c *Config, v string) error { c.Enforcement.Mode = enforce.Mode(v); return nil }},
	{"log.level", "debug, info, warn or error", setString(func(c *Config) *string { return &c.Log.Level })},
	{"log.format", "json or text", setString(func(c *Config) *string { return &c.Log.Format })},
	{"device-plugin.health-interval", "how often NR1 health is probed", setDuration(func(c *Config) *Duration { return &c.DevicePlugin.HealthInterval })},
	{"device-plugin.resync", "how often plugin sockets and registration are checked besides file events", setDuration(func(c *Config) *Duration { return &c.DevicePlugin.Resync })},
	{"nr1.sysfs-device", "NR1 device directory, relative to --path.sysfs", setString(func(c *Config) *string { return &c.NR1.SysfsDevice })},
}

func setString(field func(*Config) *string) func(*Config, string) error {
	return func(c *Config, v string) error { *field(c) = v; return nil }
}

func setBool(field func(*Config) *bool) func(*Config, string) error {
	return func(c *Config, v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("want true or false, got %q", v)
		}
		*field(c) = b
		return nil
	}
}

func setDuration(field func(*Config) *Duration) func(*Config, string) error {
	return func(c *Config, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("want a duration such as 5s, got %q", v)
		}
		field(c).Duration = d
		return nil
	}
}

// Load builds the configuration from defaults, the file named by --config (or
// NR1_AGENT_CONFIG), the environment and the command line, in rising precedence, and
// validates it. A help request returns flag.ErrHelp after printing usage to out.
func Load(args []string, getenv func(string) string, out io.Writer) (*Config, error) {
	fs := flag.NewFlagSet("nr1-agent", flag.ContinueOnError)
	fs.SetOutput(out)
	file := fs.String(configFlag, "", fmt.Sprintf("configuration file (YAML, %s %s) (env %s)", APIVersion, Kind, EnvName(configFlag)))
	given := map[string]string{}
	for _, o := range options {
		fs.Func(o.name, fmt.Sprintf("%s (env %s)", o.usage, o.env()), func(v string) error {
			given[o.name] = v
			return nil
		})
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	c := Default()
	path := *file
	if path == "" {
		path = getenv(EnvName(configFlag))
	}
	if path != "" {
		if err := c.loadFile(path); err != nil {
			return nil, err
		}
	}
	for _, o := range options {
		if v := getenv(o.env()); v != "" {
			if err := o.set(&c, v); err != nil {
				return nil, fmt.Errorf("env %s: %w", o.env(), err)
			}
		}
	}
	for _, o := range options {
		if v, ok := given[o.name]; ok {
			if err := o.set(&c, v); err != nil {
				return nil, fmt.Errorf("flag --%s: %w", o.name, err)
			}
		}
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("invalid configuration: %w", err)
	}
	return &c, nil
}

// loadFile merges the file over c, refusing unknown fields.
func (c *Config) loadFile(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	j, err := yaml.YAMLToJSONStrict(b)
	if err != nil {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := json.Unmarshal(j, &head); err != nil {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	if head.APIVersion != APIVersion || head.Kind != Kind {
		return fmt.Errorf("config file %s: apiVersion/kind: must be %s/%s, got %q/%q", path, APIVersion, Kind, head.APIVersion, head.Kind)
	}
	if err := c.decodeStrict(j); err != nil {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	return nil
}
