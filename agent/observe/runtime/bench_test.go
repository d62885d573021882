// SPDX-License-Identifier: Apache-2.0

package runtime

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/neureality-sdk/nr1-agent/agent/observe/runtime/fakecri"
)

// node200 serves a fake runtime with 50 pods of 4 containers.
func node200(b *testing.B) *fakecri.Server {
	b.Helper()
	cri := fakecri.New(filepath.Join(b.TempDir(), "cri.sock"))
	for p := range 50 {
		sb := fmt.Sprintf("sb-%02d", p)
		cri.PutSandbox(fakecri.Sandbox{ID: sb, UID: "uid-" + sb, Namespace: "ns", Name: "cg-" + sb}, true)
		for c := range 4 {
			id := fmt.Sprintf("%s-c%d-%058d", sb, c, p*4+c)
			cri.PutContainer(fakecri.Container{ID: id, SandboxID: sb, Name: fmt.Sprintf("c%d", c), Image: "nr1.local/nr1-load:dev",
				PID: 1000 + p*4 + c, CgroupsPath: "/kubepods/burstable/poduid-" + sb + "/" + id,
				Annotations: map[string]string{"nr1.neureality.ai/compute_dma_memory": "3", "io.kubernetes.container.hash": "383436c7"}}, true)
		}
	}
	if err := cri.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(cri.Stop)
	return cri
}

// BenchmarkRelist200 is a full relist of 200 containers over real gRPC: the steady
// state, where every container is known, and the cold one (a fresh watcher, one status
// call per container).
func BenchmarkRelist200(b *testing.B) {
	cri := node200(b)
	conn, err := Dial(context.Background(), "unix://"+cri.Socket)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	ctx := context.Background()
	b.Run("known", func(b *testing.B) {
		w := NewWatcher(NewClient(""), Options{Resync: time.Hour}, discard())
		if err := w.Relist(ctx, conn.RS); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if err := w.Relist(ctx, conn.RS); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("cold", func(b *testing.B) {
		for b.Loop() {
			w := NewWatcher(NewClient(""), Options{Resync: time.Hour}, discard())
			if err := w.Relist(ctx, conn.RS); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkMemoryPerContainer reports the heap the watcher holds per tracked container
// (its view plus the published snapshot).
func BenchmarkMemoryPerContainer(b *testing.B) {
	cri := node200(b)
	conn, err := Dial(context.Background(), "unix://"+cri.Socket)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	var perContainer float64
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		w := NewWatcher(NewClient(""), Options{Resync: time.Hour}, discard())
		if err := w.Relist(context.Background(), conn.RS); err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perContainer = float64(after.HeapAlloc-before.HeapAlloc) / 200
		runtime.KeepAlive(w)
	}
	b.ReportMetric(perContainer, "B/container")
}
