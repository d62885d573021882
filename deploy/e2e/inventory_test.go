// SPDX-License-Identifier: Apache-2.0

//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/neureality-sdk/nr1-agent/agent/view"
	"github.com/neureality-sdk/nr1-agent/nr1"
)

// debugSnapshot is the agent's /debug/cgs: the inventory of each CG with its usage.
type debugSnapshot struct {
	Source       string        `json:"source"`
	Taken        time.Time     `json:"taken"`
	Took         time.Duration `json:"took"`
	Unattributed nr1.Usage     `json:"unattributed"`
	CGs          []*debugCG    `json:"cgs"`
}

type debugCG struct {
	view.CG
	Usage          nr1.Usage            `json:"usage"`
	PerContainer   map[string]nr1.Usage `json:"usageByContainer"`
	UsageUncertain string               `json:"usageUncertain"`
	UncertainCause string               `json:"uncertainCause"`
	MappingsTotal  int                  `json:"mappingsTotal"`
	HandlesTotal   int                  `json:"handlesTotal"`
	Shared         *view.Shared         `json:"shared"`
}

func (s *debugSnapshot) CG(uid string) *debugCG {
	for _, cg := range s.CGs {
		if cg.UID == uid {
			return cg
		}
	}
	return nil
}

// agentDebug reads the agent's /debug/cgs.
func agentDebug(t *testing.T, c kubernetes.Interface) (*debugSnapshot, error) {
	t.Helper()
	pods, err := c.CoreV1().Pods("nr1-system").List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=nr1-agent"})
	if err != nil {
		return nil, fmt.Errorf("agent pod: %w", err)
	}
	if len(pods.Items) != 1 {
		return nil, fmt.Errorf("%d agent pods", len(pods.Items))
	}
	var s debugSnapshot
	if err := debugJSON(&pods.Items[0], "/debug/cgs?limit=500", &s); err != nil {
		return nil, err
	}
	return &s, nil
}

func TestAgentKnowsTheResNetCG(t *testing.T) {
	c := client(t)
	pod := running(t, c, createPod(t, c, podFromFile(t, "device-plugin/resnet50-cg.yaml")))
	var cg *debugCG
	eventually(t, 10*time.Second, "the agent's view of resnet50", func() error {
		s, err := agentDebug(t, c)
		if err != nil {
			return err
		}
		cg = s.CG(string(pod.UID))
		if cg == nil || !cg.AllocationKnown || len(cg.Containers) != 2 {
			return fmt.Errorf("CG %+v", cg)
		}
		for _, ctr := range cg.Containers {
			if ctr.State != "running" || len(ctr.PIDs) == 0 {
				return fmt.Errorf("container %s: state %s pids %v", ctr.Name, ctr.State, ctr.PIDs)
			}
		}
		return nil
	})
	if cg.Allocation != (nr1.Amounts{3, 0, 2392, 7}) {
		t.Errorf("CG allocation %v, want 3/0/2392/7", cg.Allocation)
	}
	for _, ctr := range cg.Containers {
		want := nr1.Amounts{}
		if ctr.Name == "health-handler" {
			want = nr1.Amounts{3, 0, 2392, 7}
		}
		if ctr.Allocation != want {
			t.Errorf("container %s allocation %v, want %v", ctr.Name, ctr.Allocation, want)
		}
		// Every process the agent attributes to the container is in the container's cgroup
		// as /proc says, and the cgroup id is that directory's inode.
		for _, pid := range ctr.PIDs {
			b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cgroup"))
			if err != nil {
				t.Fatalf("pid %d of %s: %v", pid, ctr.Name, err)
			}
			if !strings.Contains(string(b), ctr.ID) || !strings.Contains(string(b), "pod"+string(pod.UID)) {
				t.Errorf("pid %d of %s is in cgroups\n%s", pid, ctr.Name, b)
			}
		}
		if fi, err := os.Stat(ctr.Cgroup.V2); err != nil || inodeOf(fi) != ctr.CgroupID {
			t.Errorf("container %s: cgroup %s id %d: %v", ctr.Name, ctr.Cgroup.V2, ctr.CgroupID, err)
		}
	}
}
