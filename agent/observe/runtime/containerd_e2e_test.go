// SPDX-License-Identifier: Apache-2.0

//go:build e2e

package runtime

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/neureality-sdk/nr1-agent/agent/observe/cgroup"
	"github.com/neureality-sdk/nr1-agent/agent/view"
)

// containerd is a containerd 2.x of the local stack's build, run by the test on its own
// socket, root and state, so that it can be killed without disturbing anything else.
type containerd struct {
	t                        *testing.T
	bin, root, state, socket string
	config                   string
	cmd                      *exec.Cmd
}

func startContainerd(t *testing.T) *containerd {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("running containerd needs root")
	}
	cache := os.Getenv("NR1_CACHE")
	images := os.Getenv("NR1_IMAGES")
	if cache == "" || images == "" {
		t.Fatal("NR1_CACHE and NR1_IMAGES must name the local stack's binaries and images (run through make e2e)")
	}
	c := &containerd{t: t, bin: filepath.Join(cache, "path"),
		root: filepath.Join("/var/lib", fmt.Sprintf("nr1-it-%d", os.Getpid())), state: fmt.Sprintf("/run/nr1-it-%d", os.Getpid())}
	c.socket = filepath.Join(c.state, "containerd.sock")
	c.config = filepath.Join(c.state, "config.toml")
	if err := os.MkdirAll(c.state, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`version = 3
root = %q
state = %q
[grpc]
  address = %q
[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = "nr1.local/pause:1"
[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
  BinaryName = %q
  Root = %q
`, c.root, c.state, c.socket, filepath.Join(c.bin, "runc"), filepath.Join(c.state, "runc"))
	if err := os.WriteFile(c.config, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.cleanup)
	c.start()
	for _, img := range []string{"pause.tar", "nr1-load.tar"} {
		out, err := exec.Command(filepath.Join(c.bin, "ctr"), "-a", c.socket, "-n", "k8s.io", "images", "import", "--local", filepath.Join(images, img)).CombinedOutput()
		if err != nil {
			t.Fatalf("importing %s: %v\n%s", img, err, out)
		}
	}
	return c
}

func (c *containerd) start() {
	c.t.Helper()
	log, err := os.OpenFile(filepath.Join(c.state, "containerd.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		c.t.Fatal(err)
	}
	c.cmd = exec.Command(filepath.Join(c.bin, "containerd"), "--config", c.config)
	c.cmd.Stdout, c.cmd.Stderr = log, log
	c.cmd.Env = append(os.Environ(), "PATH="+c.bin+":"+os.Getenv("PATH"))
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := c.cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		conn, err := Dial(context.Background(), "unix://"+c.socket)
		if err == nil {
			_ = conn.Close()
			return
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(c.state, "containerd.log"))
			c.t.Fatalf("containerd did not come up: %v\n%s", err, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// kill ends containerd abruptly; the shims and containers go on.
func (c *containerd) kill() {
	_ = c.cmd.Process.Kill()
	_, _ = c.cmd.Process.Wait()
}

func (c *containerd) cleanup() {
	if conn, err := Dial(context.Background(), "unix://"+c.socket); err == nil {
		ctx := context.Background()
		if sbs, err := conn.RS.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{}); err == nil {
			for _, sb := range sbs.Items {
				_, _ = conn.RS.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.Id})
				_, _ = conn.RS.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.Id})
			}
		}
		_ = conn.Close()
	}
	c.kill()
	_ = exec.Command("pkill", "-KILL", "-f", "containerd-shim-runc-v2 .*-address "+c.socket).Run()
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	var ours []string
	for _, line := range strings.Split(string(mounts), "\n") {
		if f := strings.Fields(line); len(f) > 4 && (strings.HasPrefix(f[4], c.root) || strings.HasPrefix(f[4], c.state)) {
			ours = append(ours, f[4])
		}
	}
	for i := len(ours) - 1; i >= 0; i-- {
		_ = syscall.Unmount(ours[i], syscall.MNT_DETACH)
	}
	_ = os.RemoveAll(c.root)
	_ = os.RemoveAll(c.state)
	dirs, _ := filepath.Glob("/sys/fs/cgroup/*/nr1-it")
	for _, d := range dirs {
		_ = exec.Command("find", d, "-depth", "-type", "d", "-exec", "rmdir", "{}", ";").Run()
	}
}

// runPod starts a sandbox on the host network (no CNI) with one nr1-load container.
func runPod(t *testing.T, rs runtimeapi.RuntimeServiceClient, name string) (sandboxID, containerID string) {
	t.Helper()
	ctx := context.Background()
	uid := fmt.Sprintf("uid-%s-%d", name, time.Now().UnixNano())
	sbCfg := &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "it", Uid: uid},
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent:    "/nr1-it/pod" + uid,
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE}},
		},
		LogDirectory: t.TempDir(),
	}
	sb, err := rs.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: sbCfg})
	if err != nil {
		t.Fatal(err)
	}
	ctr, err := rs.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sb.PodSandboxId, SandboxConfig: sbCfg,
		Config: &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: "load"},
			Image:    &runtimeapi.ImageSpec{Image: "nr1.local/nr1-load:dev"},
			Args:     []string{"--status-file="},
			LogPath:  "load.log",
			Linux:    &runtimeapi.LinuxContainerConfig{},
		}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rs.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: ctr.ContainerId}); err != nil {
		t.Fatal(err)
	}
	return sb.PodSandboxId, ctr.ContainerId
}

func findContainer(s *Snapshot, id string) *Container {
	for _, p := range s.Pods {
		for _, c := range p.Containers {
			if c.ID == id {
				return c
			}
		}
	}
	return nil
}

func TestRealContainerd(t *testing.T) {
	cd := startContainerd(t)
	w := NewWatcher(NewClient("unix://"+cd.socket), Options{Resync: time.Hour, Poll: time.Second, MaxBackoff: 200 * time.Millisecond}, discard())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	conn, err := Dial(context.Background(), "unix://"+cd.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r := &rig{watcher: w}
	r.until(t, 5*time.Second, "connected", func(s *Snapshot) error {
		if !s.Connected {
			return fmt.Errorf("not connected")
		}
		return nil
	})

	sbID, id := runPod(t, conn.RS, "first")
	started := time.Now()
	s := r.until(t, time.Second, "started container seen within 1 s", func(s *Snapshot) error {
		if c := findContainer(s, id); c == nil || c.State != view.Running || c.PID == 0 {
			return fmt.Errorf("container %s: %+v", id, c)
		}
		return nil
	})
	t.Logf("started container seen %v after StartContainer returned", time.Since(started))
	c := findContainer(s, id)
	// The ready sandboxes as one call lists them.
	ready, err := NewClient("unix://" + cd.socket).ReadyPods(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(ready) != 1 || ready[0].SandboxID != sbID || ready[0].Name != "first" || !strings.HasPrefix(ready[0].UID, "uid-first-") || !ready[0].Ready {
		t.Errorf("ready pods %+v, want the one sandbox %s", ready, sbID)
	}
	h, err := cgroup.Detect("/sys/fs/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	paths, err := h.Resolve(c.CgroupsPath)
	if err != nil {
		t.Fatal(err)
	}
	tree, err := cgroup.ReadSubtree(paths.ProcsDir())
	pids := tree.PIDs
	if err != nil || len(pids) == 0 || pids[0] != c.PID {
		t.Fatalf("cgroup %s processes %v (%v), runtime PID %d", paths.ProcsDir(), pids, err, c.PID)
	}
	procCgroup, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(c.PID), "cgroup"))
	if err != nil {
		t.Fatal(err)
	}
	rel, _ := cgroup.Relative(c.CgroupsPath)
	if !strings.Contains(string(procCgroup), ":/"+rel+"\n") {
		t.Errorf("/proc/%d/cgroup does not name %s:\n%s", c.PID, rel, procCgroup)
	}
	if paths.V2 != "" {
		id2, err := cgroup.ID(paths.V2)
		if err != nil || id2 == 0 {
			t.Errorf("v2 id of %s: %d %v", paths.V2, id2, err)
		}
	}

	// containerd killed and restarted: the watcher reconnects and nothing is reported
	// gone in between.
	before, _ := w.Load()
	stop := make(chan struct{})
	gone := make(chan string, 1)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			if s, _ := w.Load(); findContainer(s, id) == nil {
				select {
				case gone <- fmt.Sprintf("container missing from a snapshot at %v (connected=%v)", s.Taken, s.Connected):
				default:
				}
			}
		}
	}()
	reconnects := w.Reconnects()
	cd.kill()
	r.until(t, 5*time.Second, "disconnect noticed", func(s *Snapshot) error {
		if s.Connected {
			return fmt.Errorf("still connected")
		}
		return nil
	})
	cd.start()
	after := r.until(t, 10*time.Second, "reconnected", func(s *Snapshot) error {
		if !s.Connected || w.Reconnects() == reconnects {
			return fmt.Errorf("not reconnected")
		}
		return nil
	})
	close(stop)
	select {
	case msg := <-gone:
		t.Error(msg)
	default:
	}
	if b, a := findContainer(before, id), findContainer(after, id); a == nil || a.PID != b.PID || a.State != b.State || a.CgroupsPath != b.CgroupsPath {
		t.Errorf("after the restart %+v, before %+v", a, b)
	}
	if len(after.Pods) != len(before.Pods) {
		t.Errorf("%d pods after the restart, %d before", len(after.Pods), len(before.Pods))
	}

	// Stop and removal seen within 1 s.
	if _, err := conn.RS.StopContainer(context.Background(), &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: 1}); err != nil {
		// The old connection died with containerd; use a new one.
		conn2, derr := Dial(context.Background(), "unix://"+cd.socket)
		if derr != nil {
			t.Fatal(err, derr)
		}
		defer conn2.Close()
		conn = conn2
		if _, err := conn.RS.StopContainer(context.Background(), &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: 1}); err != nil {
			t.Fatal(err)
		}
	}
	r.until(t, time.Second, "stop seen within 1 s", func(s *Snapshot) error {
		if c := findContainer(s, id); c == nil || c.State != view.Exited {
			return fmt.Errorf("container %+v", c)
		}
		return nil
	})
	if _, err := conn.RS.RemoveContainer(context.Background(), &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	r.until(t, time.Second, "removal seen within 1 s", func(s *Snapshot) error {
		if findContainer(s, id) != nil {
			return fmt.Errorf("still there")
		}
		return nil
	})
	_, _ = conn.RS.StopPodSandbox(context.Background(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: sbID})
	_, _ = conn.RS.RemovePodSandbox(context.Background(), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sbID})
	r.until(t, time.Second, "sandbox removal seen within 1 s", func(s *Snapshot) error {
		for _, p := range s.Pods {
			if p.SandboxID == sbID {
				return fmt.Errorf("sandbox still there")
			}
		}
		return nil
	})
}
