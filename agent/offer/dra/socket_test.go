// SPDX-License-Identifier: Apache-2.0

package dra

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/neureality-sdk/nr1-agent/internal/served"
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

func inode(path string) (uint64, error) {
	id, err := served.Identify(path)
	return id.Ino, err
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
