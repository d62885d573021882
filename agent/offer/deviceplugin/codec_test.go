// SPDX-License-Identifier: Apache-2.0

package deviceplugin

import (
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// equalRequests compares decoded requests by their IDs.
func equalRequests(a, b *pluginapi.AllocateRequest) bool {
	if len(a.ContainerRequests) != len(b.ContainerRequests) {
		return false
	}
	for i := range a.ContainerRequests {
		if !slices.Equal(a.ContainerRequests[i].DevicesIds, b.ContainerRequests[i].DevicesIds) {
			return false
		}
	}
	return true
}

func TestAllocateRequestDecoderMatchesProtobuf(t *testing.T) {
	req := &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{
		{DevicesIds: []string{"0", "1", "zz", "A9"}},
		{},
		{DevicesIds: []string{"7"}},
	}}
	wire, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	// A field this version does not know, as a newer kubelet might send.
	wire = protowire.AppendTag(wire, 9, protowire.VarintType)
	wire = protowire.AppendVarint(wire, 42)
	var got pluginapi.AllocateRequest
	if err := (codec{}).Unmarshal(wire, &got); err != nil {
		t.Fatal(err)
	}
	if !equalRequests(&got, req) {
		t.Fatalf("decoded %v, want %v", &got, req)
	}
	if err := (codec{}).Unmarshal(wire[:len(wire)-5], &got); err == nil {
		t.Error("truncated request accepted")
	}
}

func FuzzAllocateRequestDecoder(f *testing.F) {
	seed, _ := proto.Marshal(allocateRequest(100))
	f.Add(seed)
	f.Add([]byte{0x0a, 0x03, 0x0a, 0x01, 0x30})
	f.Fuzz(func(t *testing.T, wire []byte) {
		var fast pluginapi.AllocateRequest
		fastErr := unmarshalAllocateRequest(wire, &fast)
		var ref pluginapi.AllocateRequest
		refErr := proto.UnmarshalOptions{}.Unmarshal(wire, &ref)
		// protobuf also refuses invalid UTF-8, which the fast path leaves to Allocate.
		if fastErr != nil && refErr == nil {
			t.Fatalf("fast path refused what protobuf accepts: %v", fastErr)
		}
		if fastErr == nil && refErr == nil && !equalRequests(&fast, &ref) {
			t.Fatalf("fast %v, protobuf %v", &fast, &ref)
		}
	})
}
