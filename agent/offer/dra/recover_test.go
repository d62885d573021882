// SPDX-License-Identifier: Apache-2.0

package dra

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/neureality-sdk/nr1-agent/internal/checkpoint"
	"github.com/neureality-sdk/nr1-agent/nr1"
)

// A checkpoint that cannot be trusted does not stop the driver: the store starts empty,
// the file is kept aside for whoever wants to see it, the error says which, and the
// next write starts a good checkpoint.
func TestDamagedCheckpointIsSetAside(t *testing.T) {
	good, err := checkpoint.Encode(storeVersion, checkpointState{Claims: []Claim{{UID: "c1", Namespace: "ml", Name: "a"}}})
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		body string
		want error
	}{
		"garbage":          {"\x00\xff not json", checkpoint.ErrDamaged},
		"truncated":        {string(good[:len(good)/2]), checkpoint.ErrDamaged},
		"empty":            {"", checkpoint.ErrDamaged},
		"checksum":         {strings.Replace(string(good), `"a"`, `"b"`, 1), checkpoint.ErrDamaged},
		"another version":  {strings.Replace(string(good), `"version":2`, `"version":3`, 1), checkpoint.ErrVersion},
		"unknown fields":   {`{"claims":[{"uid":"c1"}],"extra":1}`, checkpoint.ErrDamaged},
		"claims not array": {`{"claims":{}}`, checkpoint.ErrDamaged},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "claims.json")
			if err := os.WriteFile(path, []byte(tc.body), 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := OpenStore(path)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), "set aside as "+path+".damaged") {
				t.Fatalf("OpenStore: %v, want %v naming where it was set aside", err, tc.want)
			}
			if s == nil || len(s.Claims()) != 0 {
				t.Fatalf("store %v, want an empty one", s)
			}
			if b, err := os.ReadFile(path + ".damaged"); err != nil || string(b) != tc.body {
				t.Errorf("set aside: %q, %v", b, err)
			}
			if err := s.Put(Claim{UID: "c2", Namespace: "ml", Name: "b"}); err != nil {
				t.Fatal(err)
			}
			again, err := OpenStore(path)
			if err != nil || !again.Holds("ml", "b") {
				t.Errorf("after a write: %v, holds b %v", err, again != nil && again.Holds("ml", "b"))
			}
		})
	}
}

// The checkpoint of the agent before versions (the claims unframed) is still read.
func TestVersion1CheckpointIsRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "claims.json")
	v1 := `{"claims":[{"uid":"c1","namespace":"ml","name":"a","shares":[{"request":"nr1","amounts":{"compute_dma_memory":3},"cdiDevice":"neureality.ai/nr1=c1"}]}]}`
	if err := os.WriteFile(path, []byte(v1), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := OpenStore(path)
	if err != nil {
		t.Fatal(err)
	}
	if a, ok := s.ClaimAmounts("ml", "a"); !ok || a != (nr1.Amounts{3, 0, 0, 0}) {
		t.Errorf("version 1 claim: %v %v", a, ok)
	}
}

// Claims the kubelet lists in use and the driver lost are prepared again from the API
// server: allocated this node's NR1 and reserved for a pod; any other is refused and
// stays unknown.
func TestRecoverPreparesTheClaimsInUse(t *testing.T) {
	dir := t.TempDir()
	d := testDriver(t, dir)
	inUse := func(rc *resourceapi.ResourceClaim) *resourceapi.ResourceClaim {
		rc.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "p", UID: "pod-" + rc.UID}}
		return rc
	}
	resnet := inUse(claim("c1", "resnet50-nr1", map[resourceapi.QualifiedName]string{"computeDMA": "3Mi", "dockerPartition": "2392Mi", "hvQueues": "7"}))
	elsewhere := inUse(claim("c2", "elsewhere-nr1", map[resourceapi.QualifiedName]string{"hvQueues": "1"}))
	elsewhere.Status.Allocation.Devices.Results[0].Pool = "node-b"
	idle := claim("c3", "idle-nr1", map[resourceapi.QualifiedName]string{"hvQueues": "1"})
	kept := inUse(claim("c4", "kept-nr1", map[resourceapi.QualifiedName]string{"hvQueues": "2"}))
	if res := d.Prepare(kept); res.GetError() != "" {
		t.Fatal(res.GetError())
	}
	api := &fakeAPI{claims: map[string]*resourceapi.ResourceClaim{}}
	for _, rc := range []*resourceapi.ResourceClaim{resnet, elsewhere, idle, kept} {
		api.claims["ml/"+rc.Name] = rc
	}
	refs := []ClaimRef{{"ml", "resnet50-nr1"}, {"ml", "elsewhere-nr1"}, {"ml", "idle-nr1"}, {"ml", "gone-nr1"}, {"ml", "kept-nr1"}}
	got, err := d.Recover(context.Background(), api, refs)
	if len(got) != 1 || got[0].UID != "c1" {
		t.Errorf("recovered %+v, want c1 alone", got)
	}
	for _, want := range []string{"ml/elsewhere-nr1: request nr1 allocated node-b", "ml/idle-nr1: reserved for no pod", "ml/gone-nr1: not found"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want it to say %q", err, want)
		}
	}
	if a, ok := d.store.ClaimAmounts("ml", "resnet50-nr1"); !ok || a != (nr1.Amounts{3, 0, 2392, 7}) {
		t.Errorf("recovered amounts %v %v", a, ok)
	}
	if _, err := os.Stat(filepath.Join(dir, "cdi", "nr1.neureality.ai_c1.json")); err != nil {
		t.Errorf("CDI spec of the recovered claim: %v", err)
	}
	for _, name := range []string{"elsewhere-nr1", "idle-nr1"} {
		if d.store.Holds("ml", name) {
			t.Errorf("%s recovered", name)
		}
	}
	// What the store holds is not read again.
	reads := api.reads
	if _, err := d.Recover(context.Background(), api, []ClaimRef{{"ml", "resnet50-nr1"}, {"ml", "kept-nr1"}}); err != nil || api.reads != reads {
		t.Errorf("recovering held claims: %v, %d reads", err, api.reads-reads)
	}
}
