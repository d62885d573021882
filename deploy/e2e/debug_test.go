// SPDX-License-Identifier: Apache-2.0

//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	goruntime "runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
)

// debugPort is where the agent serves /debug/*: on its pod's loopback only.
const debugPort = "9471"

// debugJSON reads path (such as /debug/cgs?limit=500) from the agent pod's debug
// listener, dialling from inside the pod's network namespace as a process of the pod
// would: the listener is on the pod's loopback, and a read must not depend on the kubelet
// (the fault tests read it while the kubelet is away).
func debugJSON(agent *corev1.Pod, path string, v any) error {
	c, err := debugClient(agent, 5*time.Second)
	if err != nil {
		return err
	}
	return getJSONWith(c, debugURL(path), v)
}

// debugClient dials the agent pod's debug listener from inside its network namespace.
func debugClient(agent *corev1.Pod, timeout time.Duration) (*http.Client, error) {
	id, err := agentContainerID(agent)
	if err != nil {
		return nil, err
	}
	return &http.Client{Timeout: timeout, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return dialInContainer(ctx, id, network, addr)
		},
	}}, nil
}

func debugURL(path string) string { return "http://127.0.0.1:" + debugPort + path }

func agentContainerID(p *corev1.Pod) (string, error) {
	for _, s := range p.Status.ContainerStatuses {
		if s.Name == "agent" && s.State.Running != nil && s.ContainerID != "" {
			return criID(s.ContainerID), nil
		}
	}
	return "", fmt.Errorf("agent pod %s: no running agent container", p.Name)
}

// pidCache remembers a process of each container: scanning /proc for every read would
// cost more than the reads.
var pidCache sync.Map // container ID → int

// dialInContainer dials from the network namespace of a process of the container.
func dialInContainer(ctx context.Context, id, network, addr string) (net.Conn, error) {
	pid, err := pidOfContainer(id)
	if err != nil {
		return nil, err
	}
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		pidCache.Delete(id)
		return nil, fmt.Errorf("container %.12s: %w", id, err)
	}
	defer ns.Close()
	self, err := os.Open(fmt.Sprintf("/proc/%d/task/%d/ns/net", os.Getpid(), unix.Gettid()))
	if err != nil {
		return nil, err
	}
	defer self.Close()
	// A socket belongs to the namespace of the thread that made it, for its whole life;
	// the thread returns to its own namespace before it runs anything else.
	goruntime.LockOSThread()
	if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
		goruntime.UnlockOSThread()
		return nil, fmt.Errorf("entering container %.12s's network namespace: %w", id, err)
	}
	conn, dialErr := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
		// The thread stays locked, so it ends with this goroutine, not serving others.
		return nil, errors.Join(dialErr, fmt.Errorf("returning to the test's network namespace: %w", err))
	}
	goruntime.UnlockOSThread()
	return conn, dialErr
}

// inContainer says whether a /proc/PID/cgroup names the container's own cgroup:
// containerd's <id>, CRI-O's crio-<id> (cgroupfs) or crio-<id>.scope (systemd), never
// CRI-O's crio-conmon-<id>, the cgroup of the container's monitor, which runs in the
// host's namespaces.
func inContainer(procCgroup []byte, id string) bool {
	for _, line := range strings.Split(string(procCgroup), "\n") {
		switch strings.TrimSuffix(path.Base(line), ".scope") {
		case id, "crio-" + id, "cri-containerd-" + id:
			return true
		}
	}
	return false
}

func pidOfContainer(id string) (int, error) {
	if v, ok := pidCache.Load(id); ok {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", v.(int))); err == nil && inContainer(b, id) {
			return v.(int), nil
		}
		pidCache.Delete(id)
	}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		b, err := os.ReadFile(d + "/cgroup")
		if err != nil || !inContainer(b, id) {
			continue
		}
		var pid int
		if _, err := fmt.Sscan(filepath.Base(d), &pid); err == nil {
			pidCache.Store(id, pid)
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no process of container %.12s", id)
}

// The debug endpoints show every CG of the node with its processes and cgroups, and the
// agent's profiles: not on the pod network, where every pod of the cluster reaches the
// metrics port, but on the pod's loopback, for kubectl port-forward.
func TestDebugOnlyOnLoopback(t *testing.T) {
	c := client(t)
	var agent *corev1.Pod
	eventually(t, 60*time.Second, "a ready agent", func() (err error) {
		agent, err = readyAgent(c)
		return err
	})
	ip := agent.Status.PodIP
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + ip + ":9470/debug/cgs")
	if err != nil {
		t.Fatalf("metrics port: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("/debug/cgs on the pod network's metrics port: %s, want 404", resp.Status)
	}
	if conn, err := net.DialTimeout("tcp", net.JoinHostPort(ip, debugPort), 5*time.Second); err == nil {
		conn.Close()
		t.Errorf("the debug port answers on the pod IP %s", ip)
	} else if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("the debug port on the pod IP: %v, want connection refused", err)
	}

	// As an operator reaches it.
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Fatal("kubectl not on PATH (run through make e2e)")
	}
	port, stop := portForward(t, kubectl, agent.Namespace, agent.Name, debugPort)
	defer stop()
	var s debugSnapshot
	if err := getJSON("http://127.0.0.1:"+port+"/debug/cgs?limit=500", &s); err != nil {
		t.Fatalf("/debug/cgs through kubectl port-forward: %v", err)
	}
	if s.Source == "" {
		t.Errorf("/debug/cgs through kubectl port-forward: no sample: %+v", s)
	}
	resp, err = (&http.Client{Timeout: 10 * time.Second}).Get("http://127.0.0.1:" + port + "/debug/pprof/heap?debug=1")
	if err != nil {
		t.Fatalf("/debug/pprof/heap through kubectl port-forward: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(string(b), "heap profile:") {
		t.Errorf("/debug/pprof/heap through kubectl port-forward: %s %.80q", resp.Status, b)
	}
	t.Logf("/debug/cgs and /debug/pprof reached through kubectl port-forward (local port %s); %d CGs", port, len(s.CGs))
}

// portForward runs kubectl port-forward to the pod's port and returns the local port. A
// kubelet restarted just before may not know the pod yet ("pod does not exist"): a
// forward that ends before it starts is tried again, for a minute.
func portForward(t *testing.T, kubectl, namespace, pod, port string) (local string, stop func()) {
	t.Helper()
	// "Forwarding from 127.0.0.1:40113 -> 9471"
	re := regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+) ->`)
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithCancel(context.Background())
		pf := exec.CommandContext(ctx, kubectl, "-n", namespace, "port-forward", "pod/"+pod, ":"+port)
		out, err := pf.StdoutPipe()
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		pf.Stderr = os.Stderr
		if err := pf.Start(); err != nil {
			cancel()
			t.Fatal(err)
		}
		started := make(chan string, 1)
		ended := make(chan struct{})
		go func() {
			defer close(ended)
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				if m := re.FindStringSubmatch(sc.Text()); m != nil {
					started <- m[1]
					break
				}
			}
			_, _ = io.Copy(io.Discard, out)
		}()
		select {
		case local = <-started:
			return local, func() { cancel(); _ = pf.Wait() }
		case <-ended:
		case <-time.After(30 * time.Second):
		}
		cancel()
		_ = pf.Wait()
		if time.Now().After(deadline) {
			t.Fatal("kubectl port-forward did not start within a minute")
		}
		time.Sleep(2 * time.Second)
	}
}
