// SPDX-License-Identifier: Apache-2.0

package inventory

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/neureality-sdk/nr1-agent/agent/observe/allocation"
	"github.com/neureality-sdk/nr1-agent/agent/observe/runtime"
	"github.com/neureality-sdk/nr1-agent/agent/view"
	"github.com/neureality-sdk/nr1-agent/nr1"
)

// pluginBooks tells what the device plugin's Allocate gave a container: the kubelet's
// figure for a container it lists, the Allocate annotations for an init container it
// leaves out, and the two compared where both are there.
type pluginBooks struct {
	log        *slog.Logger
	mismatches atomic.Int64
	mu         sync.Mutex
	reported   map[string]string // container ID → last disagreement logged
}

// listed is a listed container's allocation: the kubelet's figure. problem is its
// Allocate annotations' disagreement with that figure, for the latest instance of its
// name only (compare says which): running or exited, its annotations are what the
// kubelet last allocated to this pod, whose containers' amounts cannot change. A table
// read after the pod's successor of the same name was admitted speaks for that
// successor, possibly in part, and a booking container waiting to restart must
// contradict it as a running one does. Unreadable annotations are reported but leave the
// kubelet's figure standing.
func (p *pluginBooks) listed(cg *view.CG, c *runtime.Container, fromKubelet nr1.Amounts, compare bool) (units nr1.Amounts, problem string) {
	if !compare {
		return fromKubelet, ""
	}
	annotated, found, err := allocation.FromAnnotations(c.Annotations)
	switch {
	case err != nil:
		p.report(cg, c, err.Error())
	case found && annotated != fromKubelet:
		problem = fmt.Sprintf("container %s: Allocate annotations say %v, pod-resources says %v", c.Name, annotated, fromKubelet)
		p.report(cg, c, problem)
	}
	return fromKubelet, problem
}

// unlisted is what Allocate gave a container the kubelet does not list (an init
// container), on its annotations; found is false without any. Unreadable annotations are
// a problem only on a running container: an exited one holds nothing.
func (p *pluginBooks) unlisted(c *runtime.Container) (units nr1.Amounts, found bool, problem string) {
	annotated, found, err := allocation.FromAnnotations(c.Annotations)
	if err != nil {
		if c.State == view.Running {
			return nr1.Amounts{}, false, fmt.Sprintf("container %s: %v", c.Name, err)
		}
		return nr1.Amounts{}, false, ""
	}
	return annotated, found, ""
}

// report logs and counts a container's disagreement once.
func (p *pluginBooks) report(cg *view.CG, c *runtime.Container, problem string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reported[c.ID] == problem {
		return
	}
	p.reported[c.ID] = problem
	p.mismatches.Add(1)
	p.log.Warn("container's Allocate annotations disagree with the kubelet; its CG is left alone until they agree",
		"namespace", cg.Namespace, "pod", cg.Name, "container", c.Name, "problem", problem)
}

// forget drops what was reported of containers no longer seen.
func (p *pluginBooks) forget(seen map[string]bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id := range p.reported {
		if !seen[id] {
			delete(p.reported, id)
		}
	}
}
