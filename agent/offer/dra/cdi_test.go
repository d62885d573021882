// SPDX-License-Identifier: Apache-2.0

package dra

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	rspec "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/neureality-sdk/nr1-agent/nr1"
	"github.com/neureality-sdk/nr1-agent/nr1/device"
)

// The CDI specs the driver writes are what the container-device-interface project reads
// and validates (its cache, as containerd and CRI-O load specs), and each share's device
// injects what it says into a container's OCI spec: the NR1 files of the resources it
// holds some of, its budget, its mark. Claims of random shares, from a fixed seed.
func TestCDISpecsAreValidCDI(t *testing.T) {
	dir := t.TempDir()
	queue := filepath.Join(dir, "nr1_0_hv_queue")
	char := os.Geteuid() == 0
	if char {
		if err := unix.Mknod(queue, unix.S_IFCHR|0o666, int(unix.Mkdev(10, 200))); err != nil {
			t.Fatal(err)
		}
	} else if err := os.WriteFile(queue, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var files []device.ResolvedFile
	for _, f := range []struct {
		r    nr1.Resource
		name string
	}{{nr1.ComputeDMAMemory, "nr1_0_compute_dma"}, {nr1.CPUDMAMemory, "nr1_0_cpu_dma"}} {
		p := filepath.Join(dir, f.name)
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		files = append(files, device.ResolvedFile{File: device.File{Path: p, ContainerPath: "/dev/" + f.name}, Resource: f.r, Local: p})
	}
	files = append(files, device.ResolvedFile{File: device.File{Path: queue, ContainerPath: "/dev/nr1_0_hv_queue"}, Resource: nr1.HypervisorQueue, Local: queue,
		Identity: device.Identity{Char: char}})
	c := CDI{Dir: filepath.Join(dir, "cdi"), Files: files}
	r := rand.New(rand.NewPCG(1, 2)) // a fixed seed: the same claims every run
	var claims []Claim
	for i := range 50 {
		claim := Claim{UID: types.UID(fmt.Sprintf("0000%04d-1111-4222-8333-444455556666", i)), Namespace: "ns", Name: fmt.Sprintf("claim-%d", i)}
		for s := range 1 + r.IntN(3) {
			var a nr1.Amounts
			for _, res := range nr1.All {
				if r.IntN(3) != 0 {
					a[res] = nr1.Units(r.IntN(100))
				}
			}
			share := Share{Request: "nr1", Amounts: a}
			if r.IntN(2) == 0 {
				share.ShareID = fmt.Sprintf("share-%d", s)
			}
			claim.Shares = append(claim.Shares, share)
		}
		if err := c.Write(&claim); err != nil {
			t.Fatal(err)
		}
		claims = append(claims, claim)
	}
	cache, err := cdi.NewCache(cdi.WithSpecDirs(c.Dir), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatalf("the CDI cache refuses the specs: %v", err)
	}
	if errs := cache.GetErrors(); len(errs) > 0 {
		t.Fatalf("the CDI project finds the specs invalid: %v", errs)
	}
	for _, claim := range claims {
		if _, err := cdi.ReadSpec(c.specPath(claim), 0); err != nil {
			t.Errorf("claim %s: %v", claim.Name, err)
		}
		for _, s := range claim.Shares {
			oci := &rspec.Spec{Process: &rspec.Process{}, Linux: &rspec.Linux{}}
			if unresolved, err := cache.InjectDevices(oci, s.CDIDevice); err != nil {
				t.Errorf("%s: injecting %v: %v (unresolved %v)", claim.Name, s.CDIDevice, err, unresolved)
				continue
			}
			for _, res := range nr1.All {
				want := fmt.Sprintf("%s=%d", res.EnvVar(), s.Amounts[res])
				if !slices.Contains(oci.Process.Env, want) {
					t.Errorf("%s: %s not in the container's environment %v", s.CDIDevice, want, oci.Process.Env)
				}
			}
			queues := 0
			for _, d := range oci.Linux.Devices {
				if d.Path == "/dev/nr1_0_hv_queue" {
					queues++
				}
			}
			for _, m := range oci.Mounts {
				if m.Destination == "/dev/nr1_0_hv_queue" {
					queues++
				}
			}
			if (s.Amounts[nr1.HypervisorQueue] > 0) != (queues == 1) {
				t.Errorf("%s holding %d queues: the queue device given %d times", s.CDIDevice, s.Amounts[nr1.HypervisorQueue], queues)
			}
		}
	}
}
