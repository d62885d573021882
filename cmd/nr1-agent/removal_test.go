// SPDX-License-Identifier: Apache-2.0

package main

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/neureality-sdk/nr1-agent/bpf"
	"github.com/neureality-sdk/nr1-agent/internal/syncbuf"
)

// apiServer answers as the API server does about the agent's pod and its DaemonSet,
// which is deleted when uninstall is closed. watching is closed once the agent watches.
type apiServer struct {
	uninstall, watching chan struct{}
}

func (a *apiServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	const ds = `{"apiVersion":"apps/v1","kind":"DaemonSet","metadata":{"namespace":"nr1-system","name":"nr1-agent","uid":"ds-uid","resourceVersion":"7"}}`
	w.Header().Set("Content-Type", "application/json")
	switch r.URL.Path {
	case "/api/v1/namespaces/nr1-system/pods/nr1-agent-x7k2p":
		fmt.Fprint(w, `{"apiVersion":"v1","kind":"Pod","metadata":{"namespace":"nr1-system","name":"nr1-agent-x7k2p","uid":"pod-uid",`+
			`"ownerReferences":[{"apiVersion":"apps/v1","kind":"DaemonSet","name":"nr1-agent","uid":"ds-uid","controller":true}]}}`)
	case "/apis/apps/v1/namespaces/nr1-system/daemonsets/nr1-agent":
		select {
		case <-a.uninstall:
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"apiVersion":"v1","kind":"Status","status":"Failure","reason":"NotFound","code":404}`)
		default:
			fmt.Fprint(w, ds)
		}
	case "/apis/apps/v1/namespaces/nr1-system/daemonsets":
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		select {
		case <-a.watching:
		default:
			close(a.watching)
		}
		select {
		case <-a.uninstall:
			fmt.Fprintf(w, `{"type":"DELETED","object":%s}`+"\n", ds)
		case <-r.Context().Done():
		}
	default:
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"apiVersion":"v1","kind":"Status","status":"Failure","reason":"NotFound","code":404}`)
	}
}

// An agent stopped while its DaemonSet is deleted undoes what it did on the node; one
// stopped for any other reason (a rollout, a restart) leaves it for the next agent.
func TestStoppedAgentUndoesItsWorkOnlyWhenUninstalled(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: bpffs")
	}
	for _, uninstalled := range []bool{true, false} {
		t.Run(fmt.Sprintf("uninstalled=%v", uninstalled), func(t *testing.T) {
			args, _ := node(t, "116244")
			bpffs := t.TempDir()
			if err := unix.Mount("bpf", bpffs, "bpf", 0, ""); err != nil {
				t.Fatalf("mounting bpffs: %v", err)
			}
			t.Cleanup(func() { _ = unix.Unmount(bpffs, unix.MNT_DETACH) })
			// The agent makes its pin directory as it loads the throttle, which a kernel
			// without cgroup device programs refuses: it would then have nothing to undo.
			probe := filepath.Join(bpffs, "probe")
			thr, err := bpf.LoadThrottle(probe, nil)
			if errors.Is(err, ebpf.ErrNotSupported) {
				t.Skipf("kernel lacks cgroup device programs: %v", err)
			}
			if err != nil {
				t.Fatal(err)
			}
			_ = thr.Close()
			if err := os.Remove(probe); err != nil {
				t.Fatal(err)
			}
			api := &apiServer{uninstall: make(chan struct{}), watching: make(chan struct{})}
			srv := httptest.NewServer(api)
			t.Cleanup(srv.Close)
			kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
			if err := os.WriteFile(kubeconfig, []byte("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: "+srv.URL+"}}]\n"+
				"contexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\nusers: [{name: u, user: {}}]\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			var stderr syncbuf.Buffer
			state := filepath.Join(t.TempDir(), "state")
			cmd := exec.Command(binary, append(args, "--path.bpffs", bpffs, "--path.state", state, "--kubeconfig", kubeconfig)...)
			cmd.Env = append(os.Environ(), envPodNamespace+"=nr1-system", envPodName+"=nr1-agent-x7k2p")
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cmd.Process.Kill() })
			pins := filepath.Join(bpffs, "nr1-agent", "throttle")
			select {
			case <-api.watching:
			case <-time.After(10 * time.Second):
				t.Fatalf("the agent never watched its DaemonSet; stderr:\n%s", stderr.String())
			}
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				if _, err := os.Stat(pins); err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Skipf("the agent made no throttle pin directory (no BPF here?); stderr:\n%s", stderr.String())
				}
			}
			if uninstalled {
				close(api.uninstall)
				time.Sleep(200 * time.Millisecond) // the watch event, before the kubelet's SIGTERM
			}
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if err := cmd.Wait(); err != nil {
				t.Fatalf("exit after SIGTERM: %v; stderr:\n%s", err, stderr.String())
			}
			for _, l := range strings.Split(stderr.String(), "\n") {
				if strings.Contains(l, "DaemonSet") || strings.Contains(l, "cleanup") {
					t.Log(l)
				}
			}
			_, statErr := os.Stat(filepath.Dir(pins))
			undone := strings.Contains(stderr.String(), "cleanup: removed "+pins)
			if uninstalled && (!undone || !os.IsNotExist(statErr)) {
				t.Errorf("uninstalled agent left %s (%v); stderr:\n%s", filepath.Dir(pins), statErr, stderr.String())
			}
			if !uninstalled && (undone || statErr != nil) {
				t.Errorf("agent stopped outside an uninstall cleaned up (%v); stderr:\n%s", statErr, stderr.String())
			}
		})
	}
}
