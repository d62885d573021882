// SPDX-License-Identifier: Apache-2.0

package allocation

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/neureality-sdk/nr1-agent/nr1"
)

// PodKey names a pod as the pod-resources API does.
type PodKey struct{ Namespace, Name string }

// Table is what each container of each pod the kubelet listed was allocated. Every
// listed pod and container is present, those given nothing included: a pod that is
// absent was not listed, and its allocation is unknown, never zero.
type Table map[PodKey]map[string]Listed

// Listed is what the kubelet lists for one container: the device plugin's units, and
// the DRA claims of the NR1's driver it uses (their amounts are the driver's).
type Listed struct {
	Units  nr1.Amounts
	Claims []ClaimKey
}

// ClaimKey names a ResourceClaim.
type ClaimKey struct{ Namespace, Name string }

// equal compares two listings.
func (l Listed) equal(o Listed) bool { return l.Units == o.Units && slices.Equal(l.Claims, o.Claims) }

// Pod returns a pod's allocation per listed container; listed is false when the kubelet
// did not list the pod.
func (t Table) Pod(namespace, name string) (perContainer map[string]Listed, listed bool) {
	perContainer, listed = t[PodKey{namespace, name}]
	return perContainer, listed
}

// Equal says whether t lists the same as o.
func (t Table) Equal(o Table) bool {
	return maps.EqualFunc(t, o, func(a, b map[string]Listed) bool { return maps.EqualFunc(a, b, Listed.equal) })
}

// bytesPerUnit bounds the encoded size of one allocated unit in a List answer: the
// kubelet sends one ContainerDevices entry per device ID, each with the full resource
// name (at most 40 bytes here), a device ID of a few bytes and their framing.
const bytesPerUnit = 64

// listOverhead is room for the pods, containers and other vendors' devices of a busy
// node beside the NR1 units.
const listOverhead = 8 << 20

// MaxListBytes is the receive limit that holds a List answer in which every unit of
// capacity is allocated.
func MaxListBytes(capacity nr1.Amounts) int {
	var units nr1.Units
	for _, r := range nr1.All {
		units += capacity[r]
	}
	return int(units)*bytesPerUnit + listOverhead
}

// Client reads the kubelet's pod-resources API.
type Client struct {
	cc      *grpc.ClientConn
	lister  podresourcesapi.PodResourcesListerClient
	timeout time.Duration
}

// Dial connects to the pod-resources socket (<kubelet root>/pod-resources/kubelet.sock),
// able to receive an answer in which all of capacity is allocated. The connection is made
// lazily, so the kubelet may start later.
func Dial(socket string, capacity nr1.Amounts) (*Client, error) {
	cc, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxListBytes(capacity))))
	if err != nil {
		return nil, fmt.Errorf("pod-resources socket %s: %w", socket, err)
	}
	return &Client{cc: cc, lister: podresourcesapi.NewPodResourcesListerClient(cc), timeout: 5 * time.Second}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.cc.Close() }

// List reads every listed container's NR1 allocation. The kubelet answers with one
// ContainerDevices entry per device ID, so entries are summed, never taken as the total;
// the answer is decoded straight into the table (tableCodec).
func (c *Client) List(ctx context.Context) (Table, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var t Table
	if err := c.cc.Invoke(ctx, podresourcesapi.PodResourcesLister_List_FullMethodName, &podresourcesapi.ListPodResourcesRequest{}, &t,
		grpc.ForceCodecV2(tableCodec{})); err != nil {
		return nil, fmt.Errorf("pod-resources List: %w", err)
	}
	return t, nil
}

// Get reads one pod's NR1 allocation per listed container (pod-resources Get): a small
// question where List answers for the whole node. A Get answer holds one PodResources
// in the field where a List answer holds each, so the table's decoding reads it.
func (c *Client) Get(ctx context.Context, pod PodKey) (map[string]Listed, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var t Table
	req := &podresourcesapi.GetPodResourcesRequest{PodName: pod.Name, PodNamespace: pod.Namespace}
	if err := c.cc.Invoke(ctx, podresourcesapi.PodResourcesLister_Get_FullMethodName, req, &t, grpc.ForceCodecV2(tableCodec{})); err != nil {
		return nil, fmt.Errorf("pod-resources Get %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	containers, listed := t.Pod(pod.Namespace, pod.Name)
	if !listed {
		return nil, fmt.Errorf("pod-resources Get %s/%s: the answer names no such pod", pod.Namespace, pod.Name)
	}
	return containers, nil
}

// Ask asks the kubelet for one pod's resources (pod-resources Get, GA since Kubernetes
// 1.36) and discards the answer: it says only that the kubelet answers and still has
// the pod.
func (c *Client) Ask(ctx context.Context, pod PodKey) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	if _, err := c.lister.Get(ctx, &podresourcesapi.GetPodResourcesRequest{PodName: pod.Name, PodNamespace: pod.Namespace}); err != nil {
		return fmt.Errorf("pod-resources Get %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}
