// SPDX-License-Identifier: Apache-2.0

package allocation

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/neureality-sdk/nr1-agent/nr1"
)

// The kubelet answers List with one ContainerDevices entry per allocated unit: on a node
// whose capacity is booked, about 200,000 entries and 4 MB on the wire. Decoded into the
// generated types that is 40 MB of small objects per read; tableCodec instead walks the
// wire format once, counting device IDs per container and NR1 resource, and keeps only
// the Table. The field numbers are those of k8s.io/kubelet/pkg/apis/podresources/v1's
// api.proto (the v1 API's fields are never renumbered).
const (
	listPodResources = 1 // ListPodResourcesResponse.pod_resources
	podName          = 1 // PodResources.name
	podNamespace     = 2 // PodResources.namespace
	podContainers    = 3 // PodResources.containers
	containerName    = 1 // ContainerResources.name
	containerDevices = 2 // ContainerResources.devices
	containerDynamic = 5 // ContainerResources.dynamic_resources
	devicesResource  = 1 // ContainerDevices.resource_name
	devicesDeviceIDs = 2 // ContainerDevices.device_ids
	dynamicClaimName = 2 // DynamicResource.claim_name
	dynamicClaimNS   = 3 // DynamicResource.claim_namespace
	dynamicResources = 4 // DynamicResource.claim_resources
	claimDriverName  = 2 // ClaimResource.driver_name
)

// tableCodec is the gRPC codec of the List and Get calls: the request is marshalled as protobuf,
// the answer decoded straight into a *Table.
type tableCodec struct{}

func (tableCodec) Name() string { return "proto" }

func (tableCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("pod-resources request: %T is no protobuf message", v)
	}
	b, err := proto.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("pod-resources request: %w", err)
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

func (tableCodec) Unmarshal(data mem.BufferSlice, v any) error {
	t, ok := v.(*Table)
	if !ok {
		return fmt.Errorf("pod-resources answer: decoding into %T, want *Table", v)
	}
	table, err := decodeBuffers(data)
	if errors.Is(err, errGroup) {
		buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
		defer buf.Free()
		table, err = decodeTable(buf.ReadOnlyData())
	}
	if err != nil {
		return fmt.Errorf("pod-resources answer: %w", err)
	}
	*t = table
	return nil
}

var (
	errTruncated = errors.New("truncated or malformed protobuf")
	errGroup     = errors.New("a group at the top of the answer")
)

// decodeBuffers is decodeTable on the buffers gRPC received the answer in, one pod at a
// time: a booked node's answer is MBs and a pod's a few KB, and copying the whole into
// one buffer first cost more than decoding it. A group at the top (no kubelet sends one)
// is errGroup, left to decodeTable.
func decodeBuffers(data mem.BufferSlice) (Table, error) {
	r := data.Reader()
	defer r.Close()
	t := Table{}
	var field []byte
	for r.Remaining() > 0 {
		tag, err := binary.ReadUvarint(r)
		if err != nil {
			return nil, errTruncated
		}
		num, typ := protowire.DecodeTag(tag)
		if num < protowire.MinValidNumber {
			return nil, errTruncated
		}
		var n uint64
		switch typ {
		case protowire.VarintType:
			if _, err := binary.ReadUvarint(r); err != nil {
				return nil, errTruncated
			}
			continue
		case protowire.Fixed32Type:
			n = 4
		case protowire.Fixed64Type:
			n = 8
		case protowire.BytesType:
			if n, err = binary.ReadUvarint(r); err != nil {
				return nil, errTruncated
			}
		default:
			return nil, errGroup
		}
		if n > uint64(r.Remaining()) { //nolint:gosec // a length, never negative
			return nil, errTruncated
		}
		if num != listPodResources || typ != protowire.BytesType {
			if _, err := r.Discard(int(n)); err != nil {
				return nil, errTruncated
			}
			continue
		}
		field = slices.Grow(field[:0], int(n))[:n]
		if _, err := io.ReadFull(r, field); err != nil {
			return nil, errTruncated
		}
		if err := decodePod(field, t); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// fields calls f with each field of the message b, and fails on a malformed one.
func fields(b []byte, f func(num protowire.Number, typ protowire.Type, v []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errTruncated
		}
		b = b[n:]
		var v []byte
		if typ == protowire.BytesType {
			v, n = protowire.ConsumeBytes(b)
		} else {
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return errTruncated
		}
		b = b[n:]
		if err := f(num, typ, v); err != nil {
			return err
		}
	}
	return nil
}

// decodeTable reads a ListPodResourcesResponse.
func decodeTable(b []byte) (Table, error) {
	t := Table{}
	err := fields(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if num != listPodResources || typ != protowire.BytesType {
			return nil
		}
		return decodePod(v, t)
	})
	return t, err
}

// decodePod adds one PodResources to t.
func decodePod(b []byte, t Table) error {
	var key PodKey
	var ctrs [][]byte
	err := fields(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case podName:
			key.Name = string(v)
		case podNamespace:
			key.Namespace = string(v)
		case podContainers:
			ctrs = append(ctrs, v)
		}
		return nil
	})
	if err != nil {
		return err
	}
	containers := t[key]
	if containers == nil {
		containers = make(map[string]Listed, len(ctrs))
		t[key] = containers
	}
	for _, c := range ctrs {
		name, l, err := decodeContainer(c)
		if err != nil {
			return err
		}
		prev := containers[name]
		containers[name] = Listed{Units: nr1.Add(prev.Units, l.Units), Claims: append(prev.Claims, l.Claims...)}
	}
	return nil
}

// decodeContainer sums one ContainerResources' NR1 device IDs per resource, and lists
// the claims of the NR1's DRA driver it uses.
func decodeContainer(b []byte) (string, Listed, error) {
	var name string
	var l Listed
	err := fields(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case containerName:
			name = string(v)
		case containerDevices:
			r, ids, err := decodeDevices(v)
			if err != nil {
				return err
			}
			if r >= 0 {
				l.Units[r] += ids
			}
		case containerDynamic:
			claim, ours, err := decodeDynamic(v)
			if err != nil {
				return err
			}
			if ours {
				l.Claims = append(l.Claims, claim)
			}
		}
		return nil
	})
	return name, l, err
}

// decodeDynamic reads one DynamicResource: the claim, and whether the NR1's driver
// allocated any of its devices.
func decodeDynamic(b []byte) (ClaimKey, bool, error) {
	var k ClaimKey
	var ours bool
	err := fields(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case dynamicClaimName:
			k.Name = string(v)
		case dynamicClaimNS:
			k.Namespace = string(v)
		case dynamicResources:
			return fields(v, func(num protowire.Number, typ protowire.Type, v []byte) error {
				if num == claimDriverName && typ == protowire.BytesType && string(v) == nr1.DRADriver {
					ours = true
				}
				return nil
			})
		}
		return nil
	})
	return k, ours, err
}

// decodeDevices reads one ContainerDevices: its NR1 resource (-1 for another vendor's)
// and how many device IDs it names.
func decodeDevices(b []byte) (nr1.Resource, nr1.Units, error) {
	r, ids := nr1.Resource(-1), nr1.Units(0)
	err := fields(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case devicesResource:
			r = -1
			for _, res := range nr1.All {
				if string(v) == res.Name() {
					r = res
				}
			}
		case devicesDeviceIDs:
			ids++
		}
		return nil
	})
	return r, ids, err
}
