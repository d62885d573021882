// SPDX-License-Identifier: Apache-2.0

package device

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/sys/unix"
	"k8s.io/utils/clock"

	"github.com/neureality-sdk/nr1-agent/internal/untrusted"
	"github.com/neureality-sdk/nr1-agent/nr1"
)

// fixture lays out a sysfs root with the default NR1 device directory and device files
// in a temp dir, and returns a configuration pointing at them.
func fixture(t *testing.T) (Config, string) {
	t.Helper()
	root := t.TempDir()
	cfg := DefaultConfig()
	dev := filepath.Join(root, "sys", cfg.SysfsDevice)
	must(t, os.MkdirAll(dev, 0o755))
	for name, v := range map[string]string{
		"compute_dma_memory_mb": "116244\n", "cpu_dma_memory_mb": "512\n",
		"docker_partition_mb": "13417\n", "ai_hypervisor_queues": "65536\n", "health": "ok\n",
	} {
		must(t, os.WriteFile(filepath.Join(dev, name), []byte(v), 0o644))
	}
	for _, r := range nr1.All {
		rc := cfg.Resources[r]
		for i := range rc.Files {
			rc.Files[i].Path = filepath.Join(root, "dev", filepath.Base(rc.Files[i].Path))
			must(t, os.MkdirAll(filepath.Dir(rc.Files[i].Path), 0o755))
			must(t, os.WriteFile(rc.Files[i].Path, nil, 0o600))
		}
	}
	return cfg, filepath.Join(root, "sys")
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestCapacityFromSysfs(t *testing.T) {
	cfg, sys := fixture(t)
	got, src, err := NewInventory(cfg, sys, "/dev").Capacity()
	must(t, err)
	if want := (nr1.Amounts{116244, 512, 13417, 65536}); got != want {
		t.Fatalf("capacity %v, want %v", got, want)
	}
	for _, s := range src {
		if s != FromSysfs {
			t.Fatalf("sources %v, want all sysfs", src)
		}
	}
}

func TestCapacityPrecedence(t *testing.T) {
	cfg, sys := fixture(t)
	must(t, os.Remove(filepath.Join(sys, cfg.SysfsDevice, "cpu_dma_memory_mb")))
	must(t, os.Remove(filepath.Join(sys, cfg.SysfsDevice, "docker_partition_mb")))
	n := nr1.Units(256)
	cfg.Resources[nr1.CPUDMAMemory].Capacity = &n
	partition := t.TempDir()
	cfg.Resources[nr1.DockerPartition].Partition = &Partition{Path: partition, ReserveMB: 1}
	cfg.Resources[nr1.DockerPartition].Capacity = &n // the partition wins over the static value

	got, src, err := NewInventory(cfg, sys, "/dev").Capacity()
	must(t, err)
	var st unix.Statfs_t
	must(t, unix.Statfs(partition, &st))
	wantPartition := nr1.Units(int64(st.Blocks)*st.Bsize>>20 - 1)
	if got[nr1.CPUDMAMemory] != 256 || src[nr1.CPUDMAMemory] != FromConfig {
		t.Errorf("cpu dma: %d from %s", got[nr1.CPUDMAMemory], src[nr1.CPUDMAMemory])
	}
	if got[nr1.DockerPartition] != wantPartition || src[nr1.DockerPartition] != FromPartition {
		t.Errorf("docker partition: %d from %s, want %d from statfs", got[nr1.DockerPartition], src[nr1.DockerPartition], wantPartition)
	}
	if got[nr1.ComputeDMAMemory] != 116244 || src[nr1.ComputeDMAMemory] != FromSysfs {
		t.Errorf("compute dma: %d from %s", got[nr1.ComputeDMAMemory], src[nr1.ComputeDMAMemory])
	}
}

func TestCapacityErrors(t *testing.T) {
	t.Run("malformed attribute is not skipped", func(t *testing.T) {
		cfg, sys := fixture(t)
		n := nr1.Units(1)
		cfg.Resources[nr1.HypervisorQueue].Capacity = &n
		must(t, os.WriteFile(filepath.Join(sys, cfg.SysfsDevice, "ai_hypervisor_queues"), []byte("lots\n"), 0o644))
		_, _, err := NewInventory(cfg, sys, "/dev").Capacity()
		if err == nil || !strings.Contains(err.Error(), `ai_hypervisor_queues: want decimal digits, got "lots"`) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("no source", func(t *testing.T) {
		cfg, sys := fixture(t)
		must(t, os.Remove(filepath.Join(sys, cfg.SysfsDevice, "compute_dma_memory_mb")))
		_, _, err := NewInventory(cfg, sys, "/dev").Capacity()
		if err == nil || !strings.Contains(err.Error(), "neureality.ai/compute_dma_memory_in_mb") ||
			!strings.Contains(err.Error(), "no capacity is configured") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("reserve above partition", func(t *testing.T) {
		cfg, sys := fixture(t)
		must(t, os.Remove(filepath.Join(sys, cfg.SysfsDevice, "docker_partition_mb")))
		cfg.Resources[nr1.DockerPartition].Partition = &Partition{Path: t.TempDir(), ReserveMB: 1 << 40}
		_, _, err := NewInventory(cfg, sys, "/dev").Capacity()
		if err == nil || !strings.Contains(err.Error(), "less than the reserve") {
			t.Fatalf("err = %v", err)
		}
	})
}

// What is read of sysfs is bounded: a path configured by mistake that names a large
// file is refused, not read whole, and what an attribute holds is quoted, bounded, in
// the reason.
func TestAttributesAreBounded(t *testing.T) {
	cfg, sys := fixture(t)
	dir := filepath.Join(sys, cfg.SysfsDevice)
	must(t, os.WriteFile(filepath.Join(dir, "ai_hypervisor_queues"), bytes.Repeat([]byte("7"), 1<<20), 0o644))
	if _, _, err := NewInventory(cfg, sys, "/dev").Capacity(); err == nil || !strings.Contains(err.Error(), "longer than a sysfs attribute") {
		t.Errorf("a 1 MiB capacity attribute: %v", err)
	}
	must(t, os.WriteFile(filepath.Join(dir, "ai_hypervisor_queues"), []byte("7\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "compute_dma_memory_mb"), []byte("8796093022208\n"), 0o644)) // 2^63 bytes
	if _, _, err := NewInventory(cfg, sys, "/dev").Capacity(); err == nil || !strings.Contains(err.Error(), "want at most 8796093022207") {
		t.Errorf("a capacity whose bytes overflow: %v", err)
	}
	inv := NewInventory(cfg, sys, "/dev")
	must(t, os.WriteFile(filepath.Join(dir, "health"), []byte("degraded\x1b[2J\nok"), 0o644))
	if h := inv.Probe()[nr1.ComputeDMAMemory]; h.Healthy || !strings.Contains(h.Reason, `reads "degraded\x1b[2J\nok"`) {
		t.Errorf("health attribute with control characters: %+v", h)
	}
	must(t, os.WriteFile(filepath.Join(dir, "health"), bytes.Repeat([]byte("x"), maxAttribute+1), 0o644))
	if h := inv.Probe()[nr1.ComputeDMAMemory]; h.Healthy || !strings.Contains(h.Reason, "longer than a sysfs attribute") || len(h.Reason) > 512 {
		t.Errorf("health attribute longer than a page: %+v", h)
	}
}

func FuzzCapacityAttribute(f *testing.F) {
	f.Add([]byte("116244\n"))
	f.Add([]byte("0\n"))
	f.Add([]byte("lots\n"))
	f.Add([]byte("-1\n"))
	f.Add([]byte("8796093022208\n"))
	f.Add([]byte(" 007 "))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, r := range nr1.All {
			n, err := parseCapacity(r, b)
			if err != nil {
				continue
			}
			if n < 0 || n > r.MaxUnits() || r.InBase(n) < 0 {
				t.Fatalf("%s: %q read as %d", r.Name(), b, n)
			}
			// What a driver writes for the amount reads the same.
			if again, err := parseCapacity(r, []byte(strconv.FormatInt(int64(n), 10)+"\n")); err != nil || again != n {
				t.Fatalf("%s: %d does not survive a round trip: %d, %v", r.Name(), n, again, err)
			}
		}
	})
}

func FuzzHealthAttribute(f *testing.F) {
	f.Add([]byte("HEALTHY\n"), "healthy")
	f.Add([]byte("ok\n"), "ok")
	f.Add([]byte("degraded\n"), "healthy")
	f.Add([]byte("\x1b[2J\u202e\xff\n"), "healthy")
	f.Fuzz(func(t *testing.T, b []byte, healthy string) {
		const p = "/sys/class/neureality/nr1_0/health"
		st := parseHealth(p, b, []string{healthy})
		if want := strings.EqualFold(strings.TrimSpace(string(b)), healthy); st.Healthy != want {
			t.Fatalf("%q with healthy value %q: healthy %v, want %v", b, healthy, st.Healthy, want)
		}
		if st.Healthy {
			if st.Reason != "" {
				t.Fatalf("healthy with a reason: %q", st.Reason)
			}
			return
		}
		// The reason goes to logs and Events: one printable line of bounded length.
		if strings.ContainsAny(st.Reason, "\n\r\x00") || !utf8.ValidString(st.Reason) || len(st.Reason) > len(p)+4*untrusted.MaxQuoted+64 {
			t.Fatalf("reason %q", st.Reason)
		}
	})
}

func TestProbe(t *testing.T) {
	cfg, sys := fixture(t)
	inv := NewInventory(cfg, sys, "/dev")
	if h := inv.Probe(); !allHealthy(h) {
		t.Fatalf("fresh fixture unhealthy: %+v", h)
	}
	health := filepath.Join(sys, cfg.SysfsDevice, "health")
	must(t, os.WriteFile(health, []byte("degraded\n"), 0o644))
	h := inv.Probe()
	for _, r := range nr1.All {
		if h[r].Healthy || !strings.Contains(h[r].Reason, `reads "degraded"`) {
			t.Errorf("%s: %+v", r, h[r])
		}
	}
	must(t, os.WriteFile(health, []byte("HEALTHY"), 0o644))
	queue := cfg.Resources[nr1.HypervisorQueue].Files[0].Path
	must(t, os.Remove(queue))
	h = inv.Probe()
	if h[nr1.HypervisorQueue].Healthy || !strings.Contains(h[nr1.HypervisorQueue].Reason, queue) {
		t.Errorf("queue with its device file gone: %+v", h[nr1.HypervisorQueue])
	}
	if !h[nr1.ComputeDMAMemory].Healthy || !h[nr1.DockerPartition].Healthy {
		t.Errorf("other resources should stay healthy: %+v", h)
	}
	must(t, os.Remove(health))
	if h := inv.Probe(); h[nr1.ComputeDMAMemory].Healthy {
		t.Error("missing health attribute must be unhealthy")
	}
}

type probes []Health

func (p *probes) Probe() Health {
	h := (*p)[0]
	if len(*p) > 1 {
		*p = (*p)[1:]
	}
	return h
}

func TestMonitorWakesWatchersOnChange(t *testing.T) {
	healthy := Health{{Healthy: true}, {Healthy: true}, {Healthy: true}, {Healthy: true}}
	sick := healthy
	sick[nr1.ComputeDMAMemory] = Status{Reason: "gone"}
	m := NewMonitor(&probes{healthy}, 0, clock.RealClock{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	h, changed := m.Load()
	if h != healthy {
		t.Fatalf("initial %+v", h)
	}
	m.Update(healthy)
	select {
	case <-changed:
		t.Fatal("woken without a change")
	default:
	}
	m.Update(sick)
	select {
	case <-changed:
	default:
		t.Fatal("not woken on a change")
	}
	if h, _ := m.Load(); h != sick {
		t.Fatalf("after change %+v", h)
	}
}

func TestValidate(t *testing.T) {
	cfg := DefaultConfig()
	neg := nr1.Units(-3)
	cfg.Resources[nr1.CPUDMAMemory].Capacity = &neg
	huge := nr1.ComputeDMAMemory.MaxUnits() + 1
	cfg.Resources[nr1.ComputeDMAMemory].Capacity = &huge
	cfg.Resources[nr1.HypervisorQueue].Files = []File{{Path: "dev/q"}, {Path: "/dev/q2", Measure: "fdinfo"}, {Path: "/dev/q3", Measure: "bytes"}, {Path: "/dev/../etc/q"}}
	cfg.Resources[nr1.ComputeDMAMemory].Partition = &Partition{Path: "/x"}
	cfg.Resources[nr1.DockerPartition] = Resource{}
	cfg.SysfsDevice = "/abs"
	err := cfg.Validate("nr1")
	for _, want := range []string{
		"nr1.resources.cpu_dma_memory.capacity: must not be negative, got -3",
		"nr1.resources.compute_dma_memory.capacity: must be at most 8796093022207, got 8796093022208",
		`nr1.resources.ai_hypervisor_queue.files[0].path: must be a clean absolute path, got "dev/q"`,
		`nr1.resources.ai_hypervisor_queue.files[3].path: must be a clean absolute path, got "/dev/../etc/q"`,
		"nr1.resources.ai_hypervisor_queue.files[1].fdinfoKey: must name the fdinfo key to sum",
		`nr1.resources.ai_hypervisor_queue.files[2].measure: must be mappedBytes, openHandles or fdinfo; got "bytes"`,
		"nr1.resources.compute_dma_memory.partition: only the docker_partition",
		"nr1.resources.docker_partition: has no capacity source",
		`nr1.sysfsDevice: must be a relative path inside the sysfs root, got "/abs"`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
	def := DefaultConfig()
	if err := def.Validate("nr1"); err != nil {
		t.Errorf("default config invalid: %v", err)
	}
}

func allHealthy(h Health) bool {
	for _, s := range h {
		if !s.Healthy {
			return false
		}
	}
	return true
}

// The files are configured by their host paths (what the kubelet gives containers); the
// agent finds those of the host's /dev under --path.dev.
func TestResolve(t *testing.T) {
	_, sys := fixture(t)
	cfg := DefaultConfig() // /dev/nr1_0_compute_dma, /dev/nr1_0_cpu_dma, /dev/nr1_0_hv_queue
	hostDev := filepath.Join(t.TempDir(), "host-dev")
	must(t, os.MkdirAll(hostDev, 0o755))
	for _, name := range []string{"nr1_0_compute_dma", "nr1_0_cpu_dma", "nr1_0_hv_queue"} {
		must(t, os.WriteFile(filepath.Join(hostDev, name), nil, 0o600))
	}
	inv := NewInventory(cfg, sys, hostDev)
	files, err := inv.Resolve()
	must(t, err)
	if len(files) != 3 {
		t.Fatalf("resolved %d files, want 3: %+v", len(files), files)
	}
	for _, f := range files {
		if !strings.HasPrefix(f.Path, "/dev/") || f.Local != filepath.Join(hostDev, filepath.Base(f.Path)) || f.Ino == 0 || f.Char {
			t.Errorf("%s: %+v", f.Resource, f)
		}
	}
	if got := Local("/host/dev", "/run/nr1-sim/dev/q"); got != "/run/nr1-sim/dev/q" {
		t.Errorf("a path outside /dev moved to %s", got)
	}
	if h := inv.Probe(); !allHealthy(h) {
		t.Fatalf("resolved files unhealthy: %+v", h)
	}

	// Re-created: another inode is another file, no longer the one measured.
	queue := filepath.Join(hostDev, "nr1_0_hv_queue")
	must(t, os.Rename(queue, queue+".old"))
	must(t, os.WriteFile(queue, nil, 0o600))
	if h := inv.Probe()[nr1.HypervisorQueue]; h.Healthy || !strings.Contains(h.Reason, "not the file found at start") {
		t.Errorf("re-created queue device: %+v", h)
	}

	must(t, os.Remove(queue))
	if _, err := NewInventory(cfg, sys, hostDev).Resolve(); err == nil ||
		!strings.Contains(err.Error(), "nr1.resources.ai_hypervisor_queue.files[0] /dev/nr1_0_hv_queue") {
		t.Errorf("missing file: %v", err)
	}
	cfg.Resources[nr1.HypervisorQueue].Files = []File{{Path: "/dev/nr1_0_cpu_dma"}}
	if _, err := NewInventory(cfg, sys, hostDev).Resolve(); err == nil || !strings.Contains(err.Error(), "the same file as /dev/nr1_0_cpu_dma") {
		t.Errorf("one file configured twice: %v", err)
	}
}
