// SPDX-License-Identifier: Apache-2.0

package dra

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	"github.com/neureality-sdk/nr1-agent/agent/observe/allocation"
	"github.com/neureality-sdk/nr1-agent/nr1"
)

type fixedTables struct{ st allocation.State }

func (f fixedTables) Load() (allocation.State, <-chan struct{}) { return f.st, nil }

type countingClaims struct {
	claims map[string]*resourceapi.ResourceClaim
	reads  int
}

func (c *countingClaims) Claim(_ context.Context, ns, name string) (*resourceapi.ResourceClaim, error) {
	c.reads++
	if rc, ok := c.claims[ns+"/"+name]; ok {
		return rc.DeepCopy(), nil
	}
	return nil, errors.New("not found")
}

// The claims in use are prepared again from the API server only after the driver
// started from a damaged checkpoint, and recovery ends once they all are: otherwise the
// kubelet prepares every claim itself, and a table read before a pod's claims were
// unprepared must not prepare them again.
func TestClaimsAreRecoveredOnlyAfterADamagedCheckpoint(t *testing.T) {
	dir := t.TempDir()
	store, err := OpenStore(filepath.Join(dir, "claims.json"))
	if err != nil {
		t.Fatal(err)
	}
	driver := New(Options{Node: "node-a", Capacity: nr1.Amounts{116244, 512, 13417, 65536}, CDI: CDI{Dir: filepath.Join(dir, "cdi")},
		Store: store, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	rc := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{UID: "c1", Namespace: "ml", Name: "resnet50-nr1"},
		Status: resourceapi.ResourceClaimStatus{
			ReservedFor: []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "resnet50", UID: "p1"}},
			Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
				Request: "nr1", Driver: DriverName, Pool: "node-a", Device: DeviceName,
				ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{"hvQueues": resource.MustParse("7")},
			}}}},
		},
	}
	api := &countingClaims{claims: map[string]*resourceapi.ResourceClaim{"ml/resnet50-nr1": rc}}
	tables := fixedTables{allocation.State{Read: time.Now(), Table: allocation.Table{
		{Namespace: "ml", Name: "resnet50"}: {"health-handler": {Claims: []allocation.ClaimKey{{Namespace: "ml", Name: "resnet50-nr1"}}}},
	}}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	healthy := &Offer{driver: driver, claims: api, clk: clock.RealClock{}, log: quiet}
	if err := healthy.RecoverFrom(ctx, tables); err != nil || api.reads != 0 || store.Holds("ml", "resnet50-nr1") {
		t.Fatalf("from a sound checkpoint: %v, %d claims read, held %v", err, api.reads, store.Holds("ml", "resnet50-nr1"))
	}
	damaged := &Offer{driver: driver, claims: api, clk: clock.RealClock{}, log: quiet, recover: true}
	if err := damaged.RecoverFrom(ctx, tables); err != nil || ctx.Err() != nil {
		t.Fatalf("after a damaged checkpoint: %v (%v)", err, ctx.Err())
	}
	if a, ok := store.ClaimAmounts("ml", "resnet50-nr1"); !ok || a != (nr1.Amounts{0, 0, 0, 7}) {
		t.Errorf("recovered claim: %v %v", a, ok)
	}
}
