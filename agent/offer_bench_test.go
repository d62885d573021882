// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"strconv"
	"testing"

	"google.golang.org/protobuf/proto"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/neureality-sdk/nr1-agent/agent/offer/deviceplugin"
	"github.com/neureality-sdk/nr1-agent/agent/offer/dra"
	"github.com/neureality-sdk/nr1-agent/nr1"
)

// What each mode makes the node publish and the kubelet answer, for a typical NR1 whose
// capacity 100 CGs book between them: the device plugins' ListAndWatch answers (one
// device per unit) against the DRA driver's ResourceSlice (one device, four
// capacities), as the API server stores it; and the kubelet's pod-resources List answer
// (one entry per booked unit against one per claim). Sizes, not times: the metrics are
// bytes, the same at every iteration.
func BenchmarkOfferSize(b *testing.B) {
	capacity := nr1.Amounts{116244, 512, 13417, 65536}
	const cgs = 100
	var listAndWatch int64
	for _, r := range nr1.All {
		listAndWatch += deviceplugin.ListSize(int64(capacity[r]), true)
	}
	node := "nr1-node-0"
	slice := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "nr1-node-0-nr1.neureality.ai-abcde"},
		Spec: resourceapi.ResourceSliceSpec{Driver: dra.DriverName, NodeName: &node,
			Pool:    resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1},
			Devices: []resourceapi.Device{dra.Device(capacity, map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"model": {StringValue: ptr("NR1")}}, true, "")}},
	}
	pluginList, draList := bookedList(capacity, cgs, false), bookedList(capacity, cgs, true)
	var sliceBytes, pluginBytes, draBytes int
	for b.Loop() {
		sliceBytes = slice.Size()
		pluginBytes, draBytes = proto.Size(pluginList), proto.Size(draList)
	}
	b.ReportMetric(float64(listAndWatch), "listandwatch-bytes")
	b.ReportMetric(float64(sliceBytes), "resourceslice-bytes")
	b.ReportMetric(float64(pluginBytes), "podresources-deviceplugin-bytes")
	b.ReportMetric(float64(draBytes), "podresources-dra-bytes")
}

func ptr[T any](v T) *T { return &v }

// bookedList is the kubelet's List answer for cgs CGs booking capacity between them:
// with the device plugins one entry per unit, in DRA mode one claim each.
func bookedList(capacity nr1.Amounts, cgs int, dra bool) *podresourcesapi.ListPodResourcesResponse {
	resp := &podresourcesapi.ListPodResourcesResponse{}
	id := 0
	for i := range cgs {
		name := "cg-" + strconv.Itoa(i) + "-with-a-generated-suffix"
		ctr := &podresourcesapi.ContainerResources{Name: "health-handler"}
		if dra {
			ctr.DynamicResources = []*podresourcesapi.DynamicResource{{ClaimName: name + "-nr1-x7k2p", ClaimNamespace: "inference",
				ClaimResources: []*podresourcesapi.ClaimResource{{DriverName: nr1.DRADriver, PoolName: "nr1-node-0", DeviceName: "nr1-0",
					CdiDevices: []*podresourcesapi.CDIDevice{{Name: "neureality.ai/nr1=3f1c2a4e-claim-uid-0000-000000000000-share"}}}}}}
		} else {
			for _, r := range nr1.All {
				for range int(capacity[r]) / cgs {
					ctr.Devices = append(ctr.Devices, &podresourcesapi.ContainerDevices{ResourceName: r.Name(), DeviceIds: []string{strconv.FormatInt(int64(id), 36)}})
					id++
				}
			}
		}
		resp.PodResources = append(resp.PodResources, &podresourcesapi.PodResources{Namespace: "inference", Name: name,
			Containers: []*podresourcesapi.ContainerResources{ctr}})
	}
	return resp
}
