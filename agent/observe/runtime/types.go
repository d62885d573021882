// SPDX-License-Identifier: Apache-2.0

package runtime

import (
	"path"
	"strings"
	"time"

	"github.com/neureality-sdk/nr1-agent/agent/view"
)

// Pod is a pod sandbox and its containers, as the runtime knows them.
type Pod struct {
	UID       string `json:"uid"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	SandboxID string `json:"sandboxID"`
	// CreatedAt is when the runtime created the sandbox, after the kubelet admitted the
	// pod and allocated its devices; zero when the runtime does not say.
	CreatedAt time.Time `json:"createdAt,omitzero"`
	// Observed is when this agent first saw the sandbox, on its own clock (with its
	// monotonic reading): what a read of the kubelet's allocations is ordered against,
	// since a clock stepped between the runtime's creation time and the agent's would
	// order them wrong.
	Observed    time.Time         `json:"-"`
	Ready       bool              `json:"ready"`
	Labels      map[string]string `json:"-"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Containers  []*Container      `json:"containers"` // by name, then creation
}

// Container is one container of a pod.
type Container struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// Attempt counts the kubelet's restarts of the container: of instances of one
	// name, the highest is the latest the kubelet made.
	Attempt   uint32              `json:"attempt,omitempty"`
	Image     string              `json:"image"`
	ImageRef  string              `json:"imageRef"`
	State     view.ContainerState `json:"state"`
	CreatedAt time.Time           `json:"createdAt"`
	StartedAt time.Time           `json:"startedAt,omitzero"`
	// PID is the container's init process on the host while it runs.
	PID int `json:"pid,omitempty"`
	// CgroupsPath is the OCI spec's linux.cgroupsPath, in the runtime's driver's form.
	CgroupsPath string `json:"cgroupsPath"`
	// Annotations are the CRI status annotations; the device plugin's Allocate
	// annotations arrive here.
	Annotations map[string]string `json:"annotations,omitempty"`
	// CDIDevices are the fully qualified CDI devices the kubelet gave the container:
	// a DRA driver's claim shares, the container's init or not. CDIDevicesKnown says
	// the runtime told them: containerd does, CRI-O does not, and then ShareMounts (the
	// runtime spec's mounts into nr1.ShareDir, which the NR1's DRA driver gives each
	// share) are what says which shares it holds.
	CDIDevices      []string `json:"cdiDevices,omitempty"`
	CDIDevicesKnown bool     `json:"cdiDevicesKnown,omitempty"`
	ShareMounts     []Mount  `json:"shareMounts,omitempty"`
	// Unread says why the runtime's details of the container were not read (its
	// status refused, too large, or without the runtime's info): its PID, cgroup and
	// DRA shares are then not known, never none.
	Unread string `json:"unread,omitempty"`
}

// Mount is a mount of a container's OCI runtime spec.
type Mount struct {
	Destination string `json:"destination"`
	Source      string `json:"source"`
}

// QoS is the pod's QoS class as its cgroup placement says: Guaranteed pods sit directly
// under kubepods, the others under kubepods/burstable or kubepods/besteffort.
func (p *Pod) QoS() string {
	for _, c := range p.Containers {
		if c.CgroupsPath == "" {
			continue
		}
		s := strings.ToLower(c.CgroupsPath)
		switch {
		case strings.Contains(s, "besteffort"):
			return "BestEffort"
		case strings.Contains(s, "burstable"):
			return "Burstable"
		case strings.Contains(path.Dir(s), "kubepods"):
			return "Guaranteed"
		}
	}
	return ""
}

// Snapshot is the runtime's pods at one time. It is never modified once published.
type Snapshot struct {
	Taken time.Time `json:"taken"`
	// Connected is false while the runtime cannot be reached; the pods are then the last
	// ones seen, not an empty node.
	Connected bool   `json:"connected"`
	Runtime   string `json:"runtime"`
	Pods      []*Pod `json:"pods"` // by namespace, then name
}

// Pod returns the pod with uid, or nil.
func (s *Snapshot) Pod(uid string) *Pod {
	for _, p := range s.Pods {
		if p.UID == uid {
			return p
		}
	}
	return nil
}

// Running says whether one of the pod's containers runs.
func (p *Pod) Running() bool {
	for _, c := range p.Containers {
		if c.State == view.Running {
			return true
		}
	}
	return false
}
