// SPDX-License-Identifier: Apache-2.0

package fakecri

import (
	"context"
	"maps"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// images is the image service: image sizes by reference.
type images struct {
	runtimeapi.UnimplementedImageServiceServer
	s *Server
}

// SetImageSize makes ImageStatus of ref answer size bytes.
func (s *Server) SetImageSize(ref string, size uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.imageSizes[ref] = size
}

// SetWritable makes ContainerStats of id answer bytes of writable layer, or fail with
// err when it is not nil.
func (s *Server) SetWritable(id string, bytes uint64, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writable[id] = bytes
	s.statsErr[id] = err
}

// SetWritableMissing makes ContainerStats of id answer stats without the writable
// layer's figure, as CRI-O does when its storage cannot measure the layer.
func (s *Server) SetWritableMissing(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.noWritable[id] = true
}

// SetWritableUnsized makes ContainerStats of id answer 0 bytes measured at no time, as
// containerd does for a snapshot its periodic sync has not sized yet.
func (s *Server) SetWritableUnsized(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unsized[id] = true
}

// SetWritableSizedAt has the writable layer of container id sized at at, as containerd
// sizes its snapshots on a period of its own (now, when asked, unless set).
func (s *Server) SetWritableSizedAt(id string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sizedAt[id] = at
}

// ContainerStats answers the writable layer set with SetWritable.
func (s *Server) ContainerStats(_ context.Context, req *runtimeapi.ContainerStatsRequest) (*runtimeapi.ContainerStatsResponse, error) {
	s.count("ContainerStats")
	s.mu.Lock()
	defer s.mu.Unlock()
	id := req.GetContainerId()
	if _, ok := s.containers[id]; !ok {
		return nil, status.Errorf(codes.NotFound, "container %s not found", id)
	}
	if err := s.statsErr[id]; err != nil {
		return nil, err
	}
	if s.noWritable[id] {
		return &runtimeapi.ContainerStatsResponse{Stats: &runtimeapi.ContainerStats{
			Attributes:    &runtimeapi.ContainerAttributes{Id: id},
			WritableLayer: &runtimeapi.FilesystemUsage{Timestamp: 1},
		}}, nil
	}
	return &runtimeapi.ContainerStatsResponse{Stats: &runtimeapi.ContainerStats{
		Attributes:    &runtimeapi.ContainerAttributes{Id: id},
		WritableLayer: s.layer(id),
	}}, nil
}

// ListContainerStats answers every container's stats as ContainerStats would, and
// leaves out a container whose ContainerStats fails (as a runtime whose storage cannot
// measure one container still answers for the others).
func (s *Server) ListContainerStats(context.Context, *runtimeapi.ListContainerStatsRequest) (*runtimeapi.ListContainerStatsResponse, error) {
	s.count("ListContainerStats")
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.listStatsErr; err != nil {
		return nil, err
	}
	resp := &runtimeapi.ListContainerStatsResponse{}
	for _, id := range slices.Sorted(maps.Keys(s.containers)) {
		if s.statsErr[id] != nil {
			continue
		}
		layer := s.layer(id)
		if s.noWritable[id] {
			layer = &runtimeapi.FilesystemUsage{Timestamp: 1}
		}
		resp.Stats = append(resp.Stats, &runtimeapi.ContainerStats{Attributes: &runtimeapi.ContainerAttributes{Id: id}, WritableLayer: layer})
	}
	return resp, nil
}

// FailListContainerStats makes ListContainerStats fail with err (nil: answer again).
func (s *Server) FailListContainerStats(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.listStatsErr = err
}

func (s *Server) layer(id string) *runtimeapi.FilesystemUsage {
	if s.unsized[id] {
		return &runtimeapi.FilesystemUsage{UsedBytes: &runtimeapi.UInt64Value{}, InodesUsed: &runtimeapi.UInt64Value{}}
	}
	at, ok := s.sizedAt[id]
	if !ok {
		at = time.Now()
	}
	return &runtimeapi.FilesystemUsage{Timestamp: at.UnixNano(), UsedBytes: &runtimeapi.UInt64Value{Value: s.writable[id]}}
}

// ImageStatus answers the size set with SetImageSize.
func (i images) ImageStatus(_ context.Context, req *runtimeapi.ImageStatusRequest) (*runtimeapi.ImageStatusResponse, error) {
	i.s.count("ImageStatus")
	i.s.mu.Lock()
	defer i.s.mu.Unlock()
	ref := req.GetImage().GetImage()
	size, ok := i.s.imageSizes[ref]
	if !ok {
		return &runtimeapi.ImageStatusResponse{}, nil
	}
	return &runtimeapi.ImageStatusResponse{Image: &runtimeapi.Image{Id: ref, Size: size}}, nil
}
