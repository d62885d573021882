// SPDX-License-Identifier: Apache-2.0

package runtime

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Client is the agent's one connection to the CRI runtime, shared by the watcher, the
// docker-partition sampler and the actuator. The first call connects (to the configured
// endpoint, or the first standard socket that answers); the connection then lives as
// long as the agent, reconnecting by itself.
type Client struct {
	endpoint string

	mu   sync.Mutex
	conn *Conn
}

// NewClient returns a client of endpoint (empty: detect one of DefaultEndpoints).
func NewClient(endpoint string) *Client { return &Client{endpoint: endpoint} }

// Conn returns the connection, connecting on first use; a failed connection is tried
// again at the next call.
func (c *Client) Conn(ctx context.Context) (*Conn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn != nil {
		return c.conn, nil
	}
	conn, err := DialFirst(ctx, c.endpoint)
	if err != nil {
		return nil, err
	}
	c.conn = conn
	return conn, nil
}

// Close closes the connection.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == nil {
		return nil
	}
	err := c.conn.Close()
	c.conn = nil
	return err
}

// StopContainer stops a container, giving it timeout before SIGKILL.
func (c *Client) StopContainer(ctx context.Context, id string, timeout time.Duration) error {
	conn, err := c.Conn(ctx)
	if err != nil {
		return err
	}
	if _, err := conn.RS.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: int64(timeout / time.Second)}); err != nil {
		return fmt.Errorf("CRI StopContainer %s: %w", id, err)
	}
	return nil
}

// callTimeout bounds one CRI call, so that a hung runtime cannot wedge a stage.
const callTimeout = 10 * time.Second

// Layer is a container's writable layer as the runtime sized it: its bytes, and when
// the runtime walked it, which may be well before it was asked (containerd sizes its
// snapshots on a period of its own).
type Layer struct {
	Bytes int64
	At    time.Time
}

// WritableLayer returns a container's writable layer.
func (c *Client) WritableLayer(ctx context.Context, id string) (Layer, error) {
	conn, err := c.Conn(ctx)
	if err != nil {
		return Layer{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	st, err := conn.RS.ContainerStats(ctx, &runtimeapi.ContainerStatsRequest{ContainerId: id})
	if err != nil {
		return Layer{}, fmt.Errorf("CRI ContainerStats %s: %w", id, err)
	}
	layer, ok := writable(st.GetStats())
	if !ok {
		return Layer{}, fmt.Errorf("CRI ContainerStats %s: %w", id, ErrNoFigure)
	}
	return layer, nil
}

// WritableLayers returns the writable layer of every container the runtime lists with
// the figure, by container ID, in one call: a round of the docker partition
// costs the runtime one call, not one per container. A container not in the answer is
// for WritableLayer to read (and say why it cannot).
func (c *Client) WritableLayers(ctx context.Context) (map[string]Layer, error) {
	conn, err := c.Conn(ctx)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := conn.RS.ListContainerStats(ctx, &runtimeapi.ListContainerStatsRequest{})
	if err != nil {
		return nil, fmt.Errorf("CRI ListContainerStats: %w", err)
	}
	out := make(map[string]Layer, len(resp.GetStats()))
	for _, st := range resp.GetStats() {
		if layer, ok := writable(st); ok && st.GetAttributes().GetId() != "" {
			out[st.GetAttributes().GetId()] = layer
		}
	}
	return out, nil
}

// writable is the figure of a container's writable layer, false when the runtime
// gave none. Neither runtime says it could not measure the layer: CRI-O answers stats
// without the figure (its storage failing, the container stopping), containerd 0 bytes
// measured at no time (a snapshot its periodic sync has not sized yet, as for a
// container just started). Unknown, not empty.
func writable(st *runtimeapi.ContainerStats) (Layer, bool) {
	layer := st.GetWritableLayer()
	if layer.GetUsedBytes() == nil || layer.GetTimestamp() == 0 {
		return Layer{}, false
	}
	return Layer{Bytes: int64(layer.GetUsedBytes().GetValue()), At: time.Unix(0, layer.GetTimestamp())}, true //nolint:gosec // bytes fit
}

// ErrNoFigure is a runtime's answer without the figure asked for.
var ErrNoFigure = errors.New("the runtime's answer has no figure")

// ImageSize returns the size of an image.
func (c *Client) ImageSize(ctx context.Context, ref string) (int64, error) {
	conn, err := c.Conn(ctx)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	img, err := conn.IS.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
	if err != nil {
		return 0, fmt.Errorf("CRI ImageStatus %s: %w", ref, err)
	}
	if img.GetImage() == nil {
		// An image the runtime does not know is answered with an empty status.
		return 0, fmt.Errorf("CRI ImageStatus %s: %w", ref, ErrNoFigure)
	}
	return int64(img.GetImage().GetSize()), nil //nolint:gosec // bytes fit
}

// ReadyPods lists the runtime's ready pod sandboxes, without their containers: one call,
// for a stage that must know a pod's UID before the watcher has seen it.
func (c *Client) ReadyPods(ctx context.Context) ([]*Pod, error) {
	conn, err := c.Conn(ctx)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := conn.RS.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
		State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY},
	}})
	if err != nil {
		return nil, fmt.Errorf("CRI ListPodSandbox: %w", err)
	}
	out := make([]*Pod, 0, len(resp.GetItems()))
	for _, s := range resp.GetItems() {
		out = append(out, podOf(s.GetId(), s.GetMetadata(), s.GetState(), s.GetCreatedAt(), nil, nil))
	}
	return out, nil
}
