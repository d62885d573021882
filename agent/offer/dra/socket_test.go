// SPDX-License-Identifier: Apache-2.0

package dra

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/neureality-sdk/nr1-agent/internal/syncbuf"
)

// runDriver runs a driver on a kubelet directory of its own until the test ends, and
// returns its registration socket's path and its log.
func runDriver(t *testing.T, kubelet string, checkEvery, grace time.Duration) (d *Driver, regPath string, logged *syncbuf.Buffer, stop func()) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(kubelet, "plugins_registry"), 0o750); err != nil {
		t.Fatal(err)
	}
	d = testDriver(t, t.TempDir())
	logged = &syncbuf.Buffer{}
	d.log = slog.New(slog.NewTextHandler(logged, nil))
	d.checkEvery, d.registrationGrace = checkEvery, grace
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx, &fakeAPI{}, kubelet) }()
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(stop)
	regPath = filepath.Join(kubelet, "plugins_registry", registrationSocket)
	waitFor(t, func() bool { _, err := os.Stat(regPath); return err == nil })
	return d, regPath, logged, stop
}

// shortDir is a kubelet directory short enough for a unix socket's path.
func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "kl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func mustInode(t *testing.T, path string) uint64 {
	t.Helper()
	ino, err := inode(path)
	if err != nil {
		t.Fatal(err)
	}
	return ino
}

// answers says whether the plugin answers the kubelet's GetInfo on the socket at path.
func answers(t *testing.T, path string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	info, err := registerapi.NewRegistrationClient(dial(t, path)).GetInfo(ctx, &registerapi.InfoRequest{})
	return err == nil && info.GetName() == DriverName
}

// A socket the kubelet can no longer reach through its path (removed, or replaced by
// another file) is served anew: a new socket the kubelet's plugin watcher finds.
func TestSocketRemovedOrReplacedIsServedAnew(t *testing.T) {
	kubelet := shortDir(t)
	_, regPath, logged, _ := runDriver(t, kubelet, 10*time.Millisecond, time.Hour)
	draPath := filepath.Join(kubelet, "plugins", DriverName, draSocket)
	for _, path := range []string{regPath, draPath} {
		// An inode number is reused once freed: what is served is told by the log, and
		// by a socket at the path.
		servedAgain := strings.Count(logged.String(), "DRA plugin socket served again")
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool { return strings.Count(logged.String(), "DRA plugin socket served again") > servedAgain })
		if !strings.Contains(logged.String(), "its socket is gone") {
			t.Errorf("%s: why not logged: %s", path, logged.String())
		}
		if fi, err := os.Stat(path); err != nil || fi.Mode().Type() != os.ModeSocket {
			t.Fatalf("%s served anew: %v %v", path, fi, err)
		}

		// Replaced by a file that is no socket of the plugin's.
		servedAgain = strings.Count(logged.String(), "DRA plugin socket served again")
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool { return strings.Count(logged.String(), "DRA plugin socket served again") > servedAgain })
		if !strings.Contains(logged.String(), "its socket was replaced") {
			t.Errorf("%s: why not logged: %s", path, logged.String())
		}
		if fi, err := os.Stat(path); err != nil || fi.Mode().Type() != os.ModeSocket {
			t.Fatalf("%s served anew over the file: %v %v", path, fi, err)
		}
	}
	if !answers(t, regPath) {
		t.Error("the registration socket served anew does not answer")
	}
}

// The kubelet's plugin watcher finds a socket by its creation: one it never registered
// (an event missed, its registration failed) is served anew until it does, then left.
func TestUnregisteredSocketIsServedAnew(t *testing.T) {
	kubelet := shortDir(t)
	d, regPath, logged, _ := runDriver(t, kubelet, 10*time.Millisecond, 100*time.Millisecond)
	first := mustInode(t, regPath)
	waitFor(t, func() bool { ino, err := inode(regPath); return err == nil && ino != first })
	if !strings.Contains(logged.String(), "the kubelet has not registered the plugin") {
		t.Errorf("why not logged: %s", logged.String())
	}
	waitFor(t, func() bool { return answers(t, regPath) })
	ctx := context.Background()
	if _, err := registerapi.NewRegistrationClient(dial(t, regPath)).NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil || !d.Registered() {
		t.Fatalf("registration: %v, registered %v", err, d.Registered())
	}
	registered := mustInode(t, regPath)
	time.Sleep(300 * time.Millisecond) // three times the grace, thirty checks
	if ino := mustInode(t, regPath); ino != registered {
		t.Error("the socket of a registered plugin served anew")
	}
}

// An agent that exits after its successor started (the successor unlinked its socket
// and listens anew on the path) leaves the successor's sockets: removing them would
// have the kubelet deregister the successor, which would never be registered again.
func TestStoppingLeavesASuccessorsSocket(t *testing.T) {
	kubelet := shortDir(t)
	_, regPath, _, stopOld := runDriver(t, kubelet, time.Hour, time.Hour)
	draPath := filepath.Join(kubelet, "plugins", DriverName, draSocket)
	old := map[string]uint64{regPath: mustInode(t, regPath), draPath: mustInode(t, draPath)}
	runDriver(t, kubelet, time.Hour, time.Hour)
	for path, ino := range old {
		waitFor(t, func() bool { now, err := inode(path); return err == nil && now != ino })
	}
	successor := map[string]uint64{regPath: mustInode(t, regPath), draPath: mustInode(t, draPath)}
	stopOld()
	for path, ino := range successor {
		if now, err := inode(path); err != nil || now != ino {
			t.Errorf("%s: the successor's socket (inode %d) removed or replaced by the exiting plugin: %d, %v", path, ino, now, err)
		}
	}
	if !answers(t, regPath) {
		t.Error("the successor's registration socket does not answer")
	}
	if conn, err := net.Dial("unix", draPath); err != nil {
		t.Errorf("the successor's DRA socket: %v", err)
	} else {
		conn.Close()
	}
}
