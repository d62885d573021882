// SPDX-License-Identifier: Apache-2.0

package dra

import (
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/neureality-sdk/nr1-agent/internal/latest"
	"github.com/neureality-sdk/nr1-agent/nr1"
	"github.com/neureality-sdk/nr1-agent/nr1/device"
	"github.com/neureality-sdk/nr1-agent/nr1/manifest"
)

var typical = nr1.Amounts{116244, 512, 13417, 65536}

func healthy() device.Health {
	var h device.Health
	for _, r := range nr1.All {
		h[r] = device.Status{Healthy: true}
	}
	return h
}

// The NR1 is one device shared by any number of claims; a capacity a claim does not
// name is consumed at zero, not whole.
func TestDeviceCapacities(t *testing.T) {
	d := Device(typical, nil, true, "")
	if d.AllowMultipleAllocations == nil || !*d.AllowMultipleAllocations {
		t.Error("the NR1 is not shareable")
	}
	want := map[resourceapi.QualifiedName]string{"computeDMA": "116244Mi", "cpuDMA": "512Mi", "dockerPartition": "13417Mi", "hvQueues": "65536"}
	for name, v := range want {
		c, ok := d.Capacity[name]
		if !ok {
			t.Fatalf("no capacity %s", name)
		}
		if c.Value.Cmp(resource.MustParse(v)) != 0 {
			t.Errorf("%s = %s, want %s", name, c.Value.String(), v)
		}
		p := c.RequestPolicy
		if p == nil || p.Default == nil || !p.Default.IsZero() || p.ValidRange == nil || p.ValidRange.Min == nil || !p.ValidRange.Min.IsZero() || p.ValidRange.Step == nil {
			t.Fatalf("%s request policy %+v: want default 0, min 0 and a step", name, p)
		}
		step := "1Mi"
		if name == "hvQueues" {
			step = "1"
		}
		if p.ValidRange.Step.Cmp(resource.MustParse(step)) != 0 {
			t.Errorf("%s step %s, want %s", name, p.ValidRange.Step.String(), step)
		}
	}
	if len(d.Taints) != 0 {
		t.Errorf("a healthy NR1 tainted: %v", d.Taints)
	}
	sick := Device(typical, nil, false, "hvQueues: queue device gone")
	if len(sick.Taints) != 1 || sick.Taints[0].Effect != resourceapi.DeviceTaintEffectNoSchedule {
		t.Errorf("an unhealthy NR1's taints %v", sick.Taints)
	}
}

// testDriver is a driver over a simulated NR1's files, its CDI directory and
// checkpoint in dir.
func testDriver(t *testing.T, dir string) *Driver {
	t.Helper()
	store, err := OpenStore(filepath.Join(dir, "plugin", "checkpoint.json"))
	if err != nil {
		t.Fatal(err)
	}
	files := []device.ResolvedFile{
		{File: device.File{Path: "/dev/nr1_0_compute_dma"}, Resource: nr1.ComputeDMAMemory},
		{File: device.File{Path: "/dev/nr1_0_cpu_dma"}, Resource: nr1.CPUDMAMemory},
		{File: device.File{Path: "/dev/nr1_0_queue", ContainerPath: "/dev/nr1_queue"}, Resource: nr1.HypervisorQueue, Identity: device.Identity{Char: true}},
	}
	return New(Options{Node: "node-a", Capacity: typical, CDI: CDI{Dir: filepath.Join(dir, "cdi"), Files: files}, Store: store,
		Health: latest.New(healthy()), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
}

// claim is a claim the scheduler allocated on node-a's NR1 with the consumed amounts.
func claim(uid, name string, consumed map[resourceapi.QualifiedName]string) *resourceapi.ResourceClaim {
	cc := map[resourceapi.QualifiedName]resource.Quantity{}
	for k, v := range consumed {
		cc[k] = resource.MustParse(v)
	}
	share := types.UID("0b0d" + uid)
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), Namespace: "ml", Name: name},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
			Results: []resourceapi.DeviceRequestAllocationResult{{Request: "nr1", Driver: DriverName, Pool: "node-a", Device: DeviceName, ShareID: &share, ConsumedCapacity: cc}},
		}}},
	}
}

func TestPrepareWritesTheShareAndIsIdempotent(t *testing.T) {
	dir := t.TempDir()
	d := testDriver(t, dir)
	resnet := claim("c1", "resnet50-nr1", map[resourceapi.QualifiedName]string{"computeDMA": "3Mi", "cpuDMA": "0", "dockerPartition": "2392Mi", "hvQueues": "7"})
	got := d.Prepare(resnet)
	if got.GetError() != "" {
		t.Fatalf("prepare: %s", got.GetError())
	}
	devs := got.GetDevices()
	if len(devs) != 1 || devs[0].GetPoolName() != "node-a" || devs[0].GetDeviceName() != DeviceName || devs[0].GetShareId() != "0b0dc1" ||
		!slices.Equal(devs[0].GetRequestNames(), []string{"nr1"}) || !slices.Equal(devs[0].GetCdiDeviceIds(), []string{"neureality.ai/nr1=c1-0b0dc1"}) {
		t.Fatalf("prepared %+v", devs)
	}

	raw, err := os.ReadFile(filepath.Join(dir, "cdi", "nr1.neureality.ai_c1.json"))
	if err != nil {
		t.Fatal(err)
	}
	var spec cdispec.Spec
	if err := json.Unmarshal(raw, &spec); err != nil {
		t.Fatal(err)
	}
	if spec.Kind != "neureality.ai/nr1" || spec.Version == "" || len(spec.Devices) != 1 || spec.Devices[0].Name != "c1-0b0dc1" {
		t.Fatalf("CDI spec %s", raw)
	}
	e := spec.Devices[0].ContainerEdits
	for _, env := range []string{"NR1_COMPUTE_DMA_MEMORY_MB=3", "NR1_CPU_DMA_MEMORY_MB=0", "NR1_DOCKER_PARTITION_MB=2392", "NR1_AI_HYPERVISOR_QUEUES=7"} {
		if !slices.Contains(e.Env, env) {
			t.Errorf("CDI env %v lacks %s", e.Env, env)
		}
	}
	// The files of what the share holds some of: not the CPU DMA file (0 MB).
	if len(e.DeviceNodes) != 1 || e.DeviceNodes[0].Path != "/dev/nr1_queue" || e.DeviceNodes[0].HostPath != "/dev/nr1_0_queue" {
		t.Errorf("device nodes %+v", e.DeviceNodes)
	}
	// The DMA file, and the claim's spec as the share's mark.
	if len(e.Mounts) != 2 || e.Mounts[0].HostPath != "/dev/nr1_0_compute_dma" {
		t.Errorf("mounts %+v", e.Mounts)
	} else if dev, ok := nr1.ShareOfMount(filepath.Join(dir, "cdi"), e.Mounts[1].HostPath, e.Mounts[1].ContainerPath); !ok || dev != devs[0].GetCdiDeviceIds()[0] {
		t.Errorf("share mark %+v read as %q, want %q", e.Mounts[1], dev, devs[0].GetCdiDeviceIds()[0])
	}

	// The kubelet asks again (it restarted), and so does a restarted agent: the same
	// answer, from the checkpoint.
	again := d.Prepare(resnet)
	if again.GetError() != "" || !slices.Equal(again.GetDevices()[0].GetCdiDeviceIds(), devs[0].GetCdiDeviceIds()) {
		t.Errorf("second prepare %+v", again)
	}
	// After a reboot the CDI directory (a tmpfs) is empty and the checkpoint is not: the
	// spec is written again.
	specFile := filepath.Join(dir, "cdi", "nr1.neureality.ai_c1.json")
	if err := os.Remove(specFile); err != nil {
		t.Fatal(err)
	}
	restarted := testDriver(t, dir)
	if res := restarted.Prepare(resnet); res.GetError() != "" {
		t.Fatalf("prepare after a reboot: %s", res.GetError())
	}
	if again, err := os.ReadFile(specFile); err != nil || string(again) != string(raw) {
		t.Errorf("the spec after a reboot: %v\n%s\nwant\n%s", err, again, raw)
	}
	c, ok := restarted.store.Get("c1")
	if !ok || c.Amounts() != (nr1.Amounts{3, 0, 2392, 7}) || c.Namespace != "ml" || c.Name != "resnet50-nr1" {
		t.Fatalf("after a restart the checkpoint holds %+v (%v)", c, ok)
	}

	if err := restarted.Unprepare("c1"); err != nil {
		t.Fatalf("unprepare: %v", err)
	}
	if err := restarted.Unprepare("never"); err != nil {
		t.Fatalf("unprepare of a claim never prepared: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "cdi", "nr1.neureality.ai_c1.json")); !os.IsNotExist(err) {
		t.Errorf("CDI spec still there: %v", err)
	}
	if _, ok := testDriver(t, dir).store.Get("c1"); ok {
		t.Error("unprepared claim still in the checkpoint")
	}
	// Unprepared, the claim is recalled for a while by its share: its pod's containers
	// stopped, and the agent may still see them running, with the share's mark.
	if _, _, _, ok := restarted.store.CDIDeviceClaim("neureality.ai/nr1=c1-0b0dc1"); ok {
		t.Error("an unprepared claim still prepared")
	}
	ns, name, a, ok := restarted.store.ReleasedCDIDeviceClaim("neureality.ai/nr1=c1-0b0dc1")
	if !ok || ns != "ml" || name != "resnet50-nr1" || a != (nr1.Amounts{3, 0, 2392, 7}) {
		t.Errorf("the unprepared claim recalled as %s/%s %v (%v)", ns, name, a, ok)
	}
	restarted.store.mu.Lock()
	for dev, r := range restarted.store.released {
		r.at = r.at.Add(-recallFor - time.Second)
		restarted.store.released[dev] = r
	}
	restarted.store.mu.Unlock()
	if _, _, _, ok := restarted.store.ReleasedCDIDeviceClaim("neureality.ai/nr1=c1-0b0dc1"); ok {
		t.Error("a claim unprepared longer ago than the store recalls still recalled")
	}
}

// A claim whose allocation is not this node's NR1, or that names no consumed capacity
// (a scheduler without consumable capacity gives the whole device), is not prepared:
// its pod does not start, rather than start with an unknown budget.
func TestPrepareRefusesWhatItCannotBudget(t *testing.T) {
	d := testDriver(t, t.TempDir())
	elsewhere := claim("c2", "elsewhere", map[resourceapi.QualifiedName]string{"hvQueues": "1"})
	elsewhere.Status.Allocation.Devices.Results[0].Pool = "node-b"
	whole := claim("c3", "whole", nil)
	whole.Status.Allocation.Devices.Results[0].ConsumedCapacity = nil
	odd := claim("c4", "odd", map[resourceapi.QualifiedName]string{"computeDMA": "1500k"})

	for rc, want := range map[*resourceapi.ResourceClaim]string{elsewhere: "not this node's NR1", whole: "no consumed capacity", odd: "whole number"} {
		if got := d.Prepare(rc); !strings.Contains(got.GetError(), want) || len(got.GetDevices()) != 0 {
			t.Errorf("claim %s: %+v, want an error saying %q", rc.UID, got, want)
		}
		if _, ok := d.store.Get(rc.UID); ok {
			t.Errorf("claim %s recorded as prepared", rc.UID)
		}
	}
	if entries, _ := os.ReadDir(d.cdi.Dir); len(entries) != 0 {
		t.Errorf("CDI specs left for refused claims: %v", entries)
	}
}

// A CG's template asks for what resources.yaml says, and nothing of a resource it needs
// none of; what the scheduler then consumes converts back to the same amounts.
func TestClaimTemplateFromResourcesYAML(t *testing.T) {
	f, err := os.Open("../../../nr1/testdata/resnet50-resources.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	a, err := nr1.ParseResourcesYAML(f)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := manifest.ClaimTemplate("ml", "resnet50", a)
	reqs := tmpl.Spec.Spec.Devices.Requests
	if len(reqs) != 1 || reqs[0].Name != manifest.RequestName || reqs[0].Exactly == nil || reqs[0].Exactly.DeviceClassName != manifest.DeviceClassName {
		t.Fatalf("requests %+v", reqs)
	}
	caps := reqs[0].Exactly.Capacity.Requests
	want := map[resourceapi.QualifiedName]string{"computeDMA": "3Mi", "dockerPartition": "2392Mi", "hvQueues": "7"}
	if len(caps) != len(want) {
		t.Errorf("capacity requests %v, want %v (cpuDMA left out)", caps, want)
	}
	for k, v := range want {
		if q, ok := caps[k]; !ok || q.Cmp(resource.MustParse(v)) != 0 {
			t.Errorf("%s = %v, want %s", k, caps[k], v)
		}
	}
	if back, err := manifest.Amounts(caps); err != nil || back != a {
		t.Errorf("the requests read back as %v (%v), want %v", back, err, a)
	}
}

// Preparing a new claim (its CDI spec and the checkpoint, both written whole and synced)
// and answering a prepared one again (a kubelet restart), on the test's file system.
func BenchmarkPrepare(b *testing.B) {
	dir := b.TempDir()
	store, err := OpenStore(filepath.Join(dir, "plugin", "claims.json"))
	if err != nil {
		b.Fatal(err)
	}
	d := New(Options{Node: "node-a", Capacity: typical, CDI: CDI{Dir: filepath.Join(dir, "cdi")}, Store: store,
		Health: latest.New(healthy()), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	consumed := map[resourceapi.QualifiedName]string{"computeDMA": "3Mi", "dockerPartition": "2392Mi", "hvQueues": "7"}
	// 50 CGs prepared already: the checkpoint written at each new claim holds them.
	for i := range 50 {
		if res := d.Prepare(claim("base-"+strconv.Itoa(i), "cg", consumed)); res.GetError() != "" {
			b.Fatal(res.GetError())
		}
	}
	b.Run("claim=new", func(b *testing.B) {
		i := 0
		for b.Loop() {
			i++
			uid := "new-" + strconv.Itoa(i)
			if res := d.Prepare(claim(uid, "cg", consumed)); res.GetError() != "" {
				b.Fatal(res.GetError())
			}
			b.StopTimer()
			if err := d.Unprepare(types.UID(uid)); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	})
	b.Run("claim=prepared", func(b *testing.B) {
		rc := claim("base-0", "cg", consumed)
		for b.Loop() {
			if res := d.Prepare(rc); res.GetError() != "" {
				b.Fatal(res.GetError())
			}
		}
	})
}

// The inventory finds a claim's amounts by name; two prepared claims of one name (one
// deleted and another created under its name, the first not unprepared yet) are
// neither's until the first is unprepared.
func TestClaimAmountsByName(t *testing.T) {
	d := testDriver(t, t.TempDir())
	old := claim("u1", "cg-nr1", map[resourceapi.QualifiedName]string{"hvQueues": "2"})
	renewed := claim("u2", "cg-nr1", map[resourceapi.QualifiedName]string{"hvQueues": "9"})
	if res := d.Prepare(old); res.GetError() != "" {
		t.Fatal(res.GetError())
	}
	if a, ok := d.store.ClaimAmounts("ml", "cg-nr1"); !ok || a != (nr1.Amounts{0, 0, 0, 2}) {
		t.Fatalf("one claim: %v %v", a, ok)
	}
	if res := d.Prepare(renewed); res.GetError() != "" {
		t.Fatal(res.GetError())
	}
	if a, ok := d.store.ClaimAmounts("ml", "cg-nr1"); ok {
		t.Errorf("two claims of one name read as %v", a)
	}
	if err := d.Unprepare("u1"); err != nil {
		t.Fatal(err)
	}
	if a, ok := d.store.ClaimAmounts("ml", "cg-nr1"); !ok || a != (nr1.Amounts{0, 0, 0, 9}) {
		t.Errorf("after the first is unprepared: %v %v", a, ok)
	}
}
