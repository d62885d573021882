// SPDX-License-Identifier: Apache-2.0

package config

import (
	"encoding/json"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/neureality-sdk/nr1-agent/nr1"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const header = "apiVersion: nr1.neureality.ai/v1alpha1\nkind: AgentConfig\n"

func TestDefaultsAreValid(t *testing.T) {
	c, err := Load(nil, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.MetricsAddr != ":9470" || c.DebugAddr != "127.0.0.1:9471" || c.Paths.Kubelet != "/var/lib/kubelet" || c.DevicePluginsDir() != "/var/lib/kubelet/device-plugins" {
		t.Errorf("defaults: %+v", c)
	}
}

func TestPrecedenceFlagEnvFileDefault(t *testing.T) {
	file := writeFile(t, header+`
metricsAddr: ":1001"
paths:
  sysfs: /file/sys
  procfs: /file/proc
log:
  level: warn
devicePlugin:
  healthInterval: 7s
nr1:
  resources:
    cpu_dma_memory:
      capacity: 256
`)
	c, err := Load(
		[]string{"--config", file, "--metrics-addr", ":1003", "--device-plugin.health-interval=9s"},
		env(map[string]string{"NR1_AGENT_METRICS_ADDR": ":1002", "NR1_AGENT_PATH_SYSFS": "/env/sys", "NR1_AGENT_LOG_FORMAT": "text"}),
		io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct{ name, got, want string }{
		{"flag over env and file", c.MetricsAddr, ":1003"},
		{"env over file", c.Paths.Sysfs, "/env/sys"},
		{"file over default", c.Paths.Procfs, "/file/proc"},
		{"file", c.Log.Level, "warn"},
		{"env over default", c.Log.Format, "text"},
		{"default", c.Paths.Kubelet, "/var/lib/kubelet"},
		{"default nested kept by file merge", c.NR1.SysfsDevice, "class/neureality/nr1_0"},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s: got %q, want %q", ch.name, ch.got, ch.want)
		}
	}
	if c.DevicePlugin.HealthInterval.Duration != 9*time.Second {
		t.Errorf("flag duration: %v", c.DevicePlugin.HealthInterval)
	}
	if p := c.NR1.Resources[nr1.CPUDMAMemory].Capacity; p == nil || *p != 256 {
		t.Errorf("file capacity: %v", p)
	}
	if c.NR1.Resources[nr1.CPUDMAMemory].CapacityAttribute != "cpu_dma_memory_mb" {
		t.Errorf("default attribute lost by file merge: %q", c.NR1.Resources[nr1.CPUDMAMemory].CapacityAttribute)
	}
}

func TestConfigFileFromEnv(t *testing.T) {
	file := writeFile(t, header+"nodeName: nr1-a\n")
	c, err := Load(nil, env(map[string]string{"NR1_AGENT_CONFIG": file}), io.Discard)
	if err != nil || c.NodeName != "nr1-a" {
		t.Fatalf("%v %+v", err, c)
	}
}

func TestBadConfiguration(t *testing.T) {
	tests := []struct {
		name string
		file string
		args []string
		env  map[string]string
		want []string
	}{
		{name: "malformed YAML", file: header + "paths: [unclosed\n", want: []string{"config file", "yaml"}},
		{name: "unknown field", file: header + "paths:\n  sysfs: /sys\n  sysfss: /x\n", want: []string{"paths.sysfss: unknown field"}},
		{name: "unknown nested field", file: header + "nr1:\n  resources:\n    ai_hypervisor_queue:\n      files:\n      - path: /dev/q\n        mode: rw\n",
			want: []string{"nr1.resources.ai_hypervisor_queue.files[0].mode: unknown field"}},
		{name: "every unknown field", file: header + "paths:\n  sysfss: /x\nlog:\n  lvl: x\n", want: []string{"paths.sysfss: unknown field", "log.lvl: unknown field"}},
		{name: "unknown field in a ladder", file: header + "enforcement:\n  resources:\n    cpu_dma_memory:\n      ladder:\n      - action: warn\n        afterr: 1s\n",
			want: []string{"enforcement.resources.cpu_dma_memory.ladder[0].afterr: unknown field"}},
		{name: "duplicate field", file: header + "paths:\n  sysfs: /sys\n  sysfs: /x\n", want: []string{`line 5: key "sysfs" already set`}},
		{name: "duplicate field in JSON", file: `{"apiVersion": "nr1.neureality.ai/v1alpha1", "kind": "AgentConfig", "paths": {"sysfs": "/a", "sysfs": "/b"}}`, want: []string{`key "sysfs" already set`}},
		{name: "field of the wrong type", file: header + "sampling:\n  onChange: maybe\n", want: []string{"sampling.onChange of type bool"}},
		{name: "unknown resource", file: header + "nr1:\n  resources:\n    gpu: {}\n", want: []string{"nr1.resources.gpu: unknown field"}},
		{name: "negative capacity", file: header + "nr1:\n  resources:\n    ai_hypervisor_queue:\n      capacity: -1\n",
			want: []string{"nr1.resources.ai_hypervisor_queue.capacity: must not be negative, got -1"}},
		{name: "wrong kind", file: "apiVersion: nr1.neureality.ai/v1alpha1\nkind: Pod\n", want: []string{"apiVersion/kind", `"Pod"`}},
		{name: "no apiVersion", file: "nodeName: x\n", want: []string{"apiVersion/kind: must be nr1.neureality.ai/v1alpha1/AgentConfig"}},
		{name: "bad duration in file", file: header + "devicePlugin:\n  resync: soon\n", want: []string{`want a duration such as "5s", got "soon"`}},
		{name: "number for a duration", file: header + "devicePlugin:\n  resync: 5\n", want: []string{`want a duration such as "5s", got 5`}},
		{name: "bad duration flag", args: []string{"--device-plugin.resync", "x"}, want: []string{"flag --device-plugin.resync", `got "x"`}},
		{name: "bad env", env: map[string]string{"NR1_AGENT_LOG_LEVEL": "loud"}, want: []string{`log.level: must be one of debug, info, warn, error; got "loud"`}},
		{name: "relative path", args: []string{"--path.kubelet", "var/lib/kubelet"}, want: []string{`paths.kubelet: must be an absolute path, got "var/lib/kubelet"`}},
		{name: "bad address", args: []string{"--metrics-addr", "9470"}, want: []string{`metricsAddr: must be host:port, got "9470"`}},
		{name: "bad debug address", env: map[string]string{"NR1_AGENT_DEBUG_ADDR": "localhost"}, want: []string{`debugAddr: must be host:port or empty, got "localhost"`}},
		{name: "unknown mode", args: []string{"--mode", "plugin"}, want: []string{`mode: must be devicePlugin or dra, got "plugin"`}},
		{name: "bad mode label", file: header + "node:\n  modeLabel: \"nr1 mode\"\n", want: []string{`node.modeLabel: must be a label key, got "nr1 mode"`}},
		{name: "relative CDI directory", env: map[string]string{"NR1_AGENT_PATH_CDI": "run/cdi"}, want: []string{`paths.cdi: must be an absolute path, got "run/cdi"`}},
		{name: "allocation refresh under the interval", file: header + "sampling:\n  allocationRefresh: 500ms\n", want: []string{"sampling.allocationRefresh: must be 0s or at least sampling.interval (1s), got 500ms"}},
		{name: "unknown flag", args: []string{"--path.sysf", "/x"}, want: []string{"flag provided but not defined: -path.sysf"}},
		{name: "missing file", args: []string{"--config", "/nonexistent/nr1.yaml"}, want: []string{"/nonexistent/nr1.yaml"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := tt.args
			if tt.file != "" {
				args = append([]string{"--config", writeFile(t, tt.file)}, args...)
			}
			_, err := Load(args, env(tt.env), io.Discard)
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestDurationsReadAndWritten(t *testing.T) {
	c, err := Load([]string{"--config", writeFile(t, header+"devicePlugin:\n  resync: 1m30s\n")}, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(c.DevicePlugin)
	if err != nil || string(b) != `{"healthInterval":"5s","resync":"1m30s"}` {
		t.Errorf("written as %s %v", b, err)
	}
}

func TestHelp(t *testing.T) {
	var out strings.Builder
	_, err := Load([]string{"-h"}, env(nil), &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("err = %v", err)
	}
	for _, w := range []string{"-path.sysfs", "NR1_AGENT_PATH_SYSFS", "NR1_AGENT_CONFIG"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("usage lacks %q", w)
		}
	}
}

// A ladder configured for one resource leaves the others' as they were: the defaults
// share no slice between resources.
func TestOneResourcesLadderLeavesTheOthers(t *testing.T) {
	cfg := Default()
	if err := cfg.decodeStrict([]byte(`{"enforcement":{"resources":{"compute_dma_memory":{"ladder":[{"action":"kill","after":"1m"}]}}}}`)); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("a kill after a minute for compute DMA memory alone: %v", err)
	}
	want := Default().Enforcement.Resources
	for _, r := range []nr1.Resource{nr1.CPUDMAMemory, nr1.HypervisorQueue} {
		if got := cfg.Enforcement.Resources[r].Ladder; !reflect.DeepEqual(got, want[r].Ladder) {
			t.Errorf("%s's ladder %v, want the default %v", r.Short(), got, want[r].Ladder)
		}
	}
}
