// Package inventory joins what the runtime, the kubelet and the kernel say about each
// pod into one view: per compute graph (a pod), its containers with their cgroups and
// processes, and the NR1 allocation the CG was given.
package inventory

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/neureality-sdk/nr1-agent/agent/allocation"
	"github.com/neureality-sdk/nr1-agent/agent/cgroup"
	"github.com/neureality-sdk/nr1-agent/agent/runtime"
	"github.com/neureality-sdk/nr1-agent/nr1"
)

// Snapshot is the node's CGs at one time.
type Snapshot struct {
	Taken            time.Time `json:"taken"`
	RuntimeConnected bool      `json:"runtimeConnected"`
	// AllocationRead is when the pod-resources API was last read; zero means allocations
	// are not known yet.
	AllocationRead time.Time `json:"allocationRead,omitzero"`
	CGs            []*CG     `json:"cgs"`
}

// CG is a compute graph: one pod, whose allocation is the sum over its containers.
type CG struct {
	UID       string `json:"uid"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	QoS       string `json:"qos"`
	// Ready is false for a sandbox the runtime keeps after its pod ended; a pod recreated
	// under the same name has a new, ready one.
	Ready bool `json:"ready"`
	// Allocation is what the kubelet allocated to the pod's containers, summed.
	Allocation nr1.Amounts `json:"allocation"`
	// AllocationKnown is true when the pod-resources API has been read.
	AllocationKnown bool              `json:"allocationKnown"`
	Annotations     map[string]string `json:"annotations,omitempty"`
	Containers      []*Container      `json:"containers"`
}

// Container is one container of a CG.
type Container struct {
	ID        string                 `json:"id"`
	Name      string                 `json:"name"`
	Image     string                 `json:"image"`
	ImageRef  string                 `json:"imageRef"`
	State     runtime.ContainerState `json:"state"`
	StartedAt time.Time              `json:"startedAt,omitzero"`
	Cgroup    cgroup.Paths           `json:"cgroup"`
	// CgroupID is the v2 cgroup id (0 on legacy hosts or when the cgroup is gone).
	CgroupID uint64 `json:"cgroupID,omitempty"`
	PIDs     []int  `json:"pids,omitempty"`
	// Allocation is what the pod-resources API says this container was given.
	Allocation nr1.Amounts `json:"allocation"`
}

// RuntimeSource is the runtime watcher as the inventory reads it.
type RuntimeSource interface {
	Load() (*runtime.Snapshot, <-chan struct{})
}

// AllocationSource is the pod-resources tracker as the inventory reads it.
type AllocationSource interface {
	Load() allocation.State
}

// Builder builds snapshots.
type Builder struct {
	runtime    RuntimeSource
	allocation AllocationSource
	cgroups    cgroup.Hierarchy
	log        *slog.Logger

	mismatches atomic.Int64
	mu         sync.Mutex
	reported   map[string]string // container ID → last disagreement logged
}

// NewBuilder returns a builder over the runtime watcher, the allocation tracker and the
// host's cgroups.
func NewBuilder(rt RuntimeSource, alloc AllocationSource, cgroups cgroup.Hierarchy, log *slog.Logger) *Builder {
	return &Builder{runtime: rt, allocation: alloc, cgroups: cgroups, log: log, reported: map[string]string{}}
}

// Mismatches counts containers whose Allocate annotations disagreed with the
// pod-resources API (which wins).
func (b *Builder) Mismatches() int64 { return b.mismatches.Load() }

// Build reads the sources and the cgroups now.
func (b *Builder) Build(now time.Time) *Snapshot {
	rs, _ := b.runtime.Load()
	alloc := b.allocation.Load()
	snap := &Snapshot{Taken: now, RuntimeConnected: rs.Connected, AllocationRead: alloc.Read, CGs: make([]*CG, 0, len(rs.Pods))}
	seen := make(map[string]bool)
	for _, p := range rs.Pods {
		total, perContainer := alloc.Table.Pod(p.Namespace, p.Name)
		cg := &CG{
			UID: p.UID, Namespace: p.Namespace, Name: p.Name, QoS: p.QoS(), Ready: p.Ready, Annotations: p.Annotations,
			Allocation: total, AllocationKnown: !alloc.Read.IsZero(), Containers: make([]*Container, 0, len(p.Containers)),
		}
		for _, c := range p.Containers {
			seen[c.ID] = true
			ctr := b.container(c, perContainer[c.Name])
			// Only running containers of pods the kubelet lists can be compared: the
			// pod-resources list lags a new pod by up to an interval and drops a pod
			// before the runtime forgets its exited containers.
			if perContainer != nil && c.State == runtime.Running {
				b.crossCheck(cg, c, ctr.Allocation)
			}
			cg.Containers = append(cg.Containers, ctr)
		}
		snap.CGs = append(snap.CGs, cg)
	}
	b.forget(seen)
	return snap
}

func (b *Builder) container(c *runtime.Container, alloc nr1.Amounts) *Container {
	ctr := &Container{
		ID: c.ID, Name: c.Name, Image: c.Image, ImageRef: c.ImageRef, State: c.State, StartedAt: c.StartedAt,
		Allocation: alloc,
	}
	if c.State != runtime.Running || c.CgroupsPath == "" {
		return ctr
	}
	paths, err := b.cgroups.Resolve(c.CgroupsPath)
	if err != nil {
		b.log.Debug("container cgroup unresolved", "container", c.ID, "err", err)
		return ctr
	}
	ctr.Cgroup = paths
	if paths.V2 != "" {
		if id, err := cgroup.ID(paths.V2); err == nil {
			ctr.CgroupID = id
		}
	}
	// The container may have exited since the runtime said it runs: no processes then.
	if pids, err := cgroup.Procs(paths.ProcsDir()); err == nil {
		ctr.PIDs = pids
	}
	return ctr
}

// crossCheck compares the Allocate annotations with the pod-resources figure, logging
// each disagreement once.
func (b *Builder) crossCheck(cg *CG, c *runtime.Container, fromKubelet nr1.Amounts) {
	annotated, found, err := allocation.FromAnnotations(c.Annotations)
	var problem string
	switch {
	case err != nil:
		problem = err.Error()
	case found && annotated != fromKubelet:
		problem = fmt.Sprintf("annotations say %v, pod-resources says %v", annotated, fromKubelet)
	default:
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.reported[c.ID] == problem {
		return
	}
	b.reported[c.ID] = problem
	b.mismatches.Add(1)
	b.log.Warn("container's Allocate annotations disagree with the kubelet; using the kubelet's",
		"namespace", cg.Namespace, "pod", cg.Name, "container", c.Name, "problem", problem)
}

func (b *Builder) forget(seen map[string]bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for id := range b.reported {
		if !seen[id] {
			delete(b.reported, id)
		}
	}
}

// CG returns the CG with uid, or nil.
func (s *Snapshot) CG(uid string) *CG {
	for _, cg := range s.CGs {
		if cg.UID == uid {
			return cg
		}
	}
	return nil
}
