// Package allocation knows what each container was given of the NR1 resources: from the
// kubelet's pod-resources API, which wins, cross-checked with the annotations the device
// plugin's Allocate put on the container.
package allocation

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/neureality-sdk/nr1-agent/nr1"
)

// PodKey names a pod as the pod-resources API does.
type PodKey struct{ Namespace, Name string }

// Table is what each container of each pod was allocated.
type Table map[PodKey]map[string]nr1.Amounts

// Pod returns a pod's allocation, summed over its containers, and per container.
func (t Table) Pod(namespace, name string) (nr1.Amounts, map[string]nr1.Amounts) {
	var total nr1.Amounts
	for _, a := range t[PodKey{namespace, name}] {
		total = total.Add(a)
	}
	return total, t[PodKey{namespace, name}]
}

// Client reads the kubelet's pod-resources API.
type Client struct {
	cc     *grpc.ClientConn
	lister podresourcesapi.PodResourcesListerClient
}

// Dial connects to the pod-resources socket (<kubelet root>/pod-resources/kubelet.sock).
// The connection is made lazily, so the kubelet may start later.
func Dial(socket string) (*Client, error) {
	cc, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16<<20)))
	if err != nil {
		return nil, fmt.Errorf("pod-resources socket %s: %w", socket, err)
	}
	return &Client{cc: cc, lister: podresourcesapi.NewPodResourcesListerClient(cc)}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.cc.Close() }

// List reads every container's NR1 allocation. The kubelet answers with one
// ContainerDevices entry per device ID, so entries are summed, never taken as the total.
func (c *Client) List(ctx context.Context) (Table, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := c.lister.List(ctx, &podresourcesapi.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("pod-resources List: %w", err)
	}
	t := Table{}
	for _, pod := range resp.GetPodResources() {
		for _, ctr := range pod.GetContainers() {
			a, found := sumDevices(ctr.GetDevices())
			if !found {
				continue
			}
			key := PodKey{pod.GetNamespace(), pod.GetName()}
			if t[key] == nil {
				t[key] = map[string]nr1.Amounts{}
			}
			t[key][ctr.GetName()] = t[key][ctr.GetName()].Add(a)
		}
	}
	return t, nil
}

// Allocatable reads the node's allocatable NR1 units as the kubelet sees them.
func (c *Client) Allocatable(ctx context.Context) (nr1.Amounts, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := c.lister.GetAllocatableResources(ctx, &podresourcesapi.AllocatableResourcesRequest{})
	if err != nil {
		return nr1.Amounts{}, fmt.Errorf("pod-resources GetAllocatableResources: %w", err)
	}
	a, _ := sumDevices(resp.GetDevices())
	return a, nil
}

func sumDevices(devs []*podresourcesapi.ContainerDevices) (nr1.Amounts, bool) {
	var (
		a     nr1.Amounts
		found bool
	)
	for _, d := range devs {
		r, err := nr1.ParseResource(d.GetResourceName())
		if err != nil || r.Name() != d.GetResourceName() {
			continue // another vendor's resource
		}
		a[r] += int64(len(d.GetDeviceIds()))
		found = true
	}
	return a, found
}
