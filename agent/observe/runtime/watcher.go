// SPDX-License-Identifier: Apache-2.0

package runtime

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"reflect"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/wait"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"

	"github.com/neureality-sdk/nr1-agent/internal/latest"
)

// Options tune a Watcher.
type Options struct {
	// Resync is how often the full list is read again while events flow.
	Resync time.Duration
	// Poll is how often the list is read from a runtime without events.
	Poll time.Duration
	// MaxBackoff bounds the wait between reconnection attempts.
	MaxBackoff time.Duration
	// Clock times the resync, the poll and the reconnection backoff (nil: the real
	// clock), so that tests step a fake one. The deadlines of CRI calls stay on real
	// time: they bound calls to a real runtime.
	Clock clock.WithTicker
}

// Watcher keeps an up-to-date view of the node's pods and containers.
type Watcher struct {
	client *Client
	opts   Options
	log    *slog.Logger

	mu         sync.Mutex
	pods       map[string]*Pod       // by sandbox ID
	containers map[string]*Container // by container ID
	sandboxOf  map[string]string     // container ID → sandbox ID
	reconnects int
	runtime    string // name and version of the runtime last connected
	// unreadable are the containers whose verbose info could not be read, each logged
	// once.
	unreadable map[string]bool

	value *latest.Value[*Snapshot] // immutable snapshots, published under mu
	latest.View[*Snapshot]
}

// NewWatcher returns a watcher of the runtime client talks to; Run connects it.
func NewWatcher(client *Client, opts Options, log *slog.Logger) *Watcher {
	if opts.MaxBackoff == 0 {
		opts.MaxBackoff = 5 * time.Second
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	value := latest.New(&Snapshot{})
	return &Watcher{
		client: client, opts: opts, log: log,
		pods: map[string]*Pod{}, containers: map[string]*Container{}, sandboxOf: map[string]string{},
		unreadable: map[string]bool{}, value: value, View: value.View(),
	}
}

// Reconnects counts the times the runtime was lost and the watcher connected again.
func (w *Watcher) Reconnects() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.reconnects
}

// Run follows the runtime until ctx ends, reconnecting with backoff. While the runtime
// is away the last view is kept: a container is reported gone only when the runtime
// says so.
func (w *Watcher) Run(ctx context.Context) error {
	backoff := w.reconnectBackoff()
	for attempt := 0; ; attempt++ {
		conn, err := w.client.Conn(ctx)
		if err == nil {
			// Asked at every session: it tells the runtime answers again, and an
			// upgraded runtime's new version.
			err = conn.version(ctx)
		}
		if err == nil {
			if attempt > 0 {
				w.countReconnect()
			}
			w.log.Info("connected to container runtime", "endpoint", conn.Endpoint, "runtime", conn.Runtime)
			start := w.opts.Clock.Now()
			err = w.session(ctx, conn)
			if w.opts.Clock.Since(start) > 10*time.Second {
				backoff = w.reconnectBackoff() // it was healthy for a while
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		w.setConnected(false)
		w.value.Fail(err)
		delay := backoff.Step()
		w.log.Warn("container runtime unavailable, retrying", "err", err, "in", delay)
		select {
		case <-ctx.Done():
			return nil
		case <-w.opts.Clock.After(delay):
		}
	}
}

// reconnectBackoff doubles from 100ms up to MaxBackoff; its steps are waited on the
// watcher's clock.
func (w *Watcher) reconnectBackoff() wait.Backoff {
	return wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Cap: w.opts.MaxBackoff, Steps: math.MaxInt32}
}

// session subscribes to events, lists, then applies events (or polls) until the
// connection breaks. Subscribing first means no event between the list and the
// subscription is lost: it waits in the stream until the list is in.
func (w *Watcher) session(ctx context.Context, conn *Conn) error {
	w.mu.Lock()
	w.runtime = conn.Runtime
	w.mu.Unlock()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events := make(chan *runtimeapi.ContainerEventResponse)
	errc := make(chan error, 1)
	stream, err := conn.RS.GetContainerEvents(sctx, &runtimeapi.GetEventsRequest{})
	if err != nil {
		errc <- err
	} else {
		go func() {
			for {
				ev, err := stream.Recv()
				if err != nil {
					errc <- err
					return
				}
				select {
				case events <- ev:
				case <-sctx.Done():
					return
				}
			}
		}()
	}
	if err := w.Relist(ctx, conn.RS); err != nil {
		return err
	}
	w.setConnected(true)
	resync := w.opts.Clock.NewTicker(w.opts.Resync)
	defer resync.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev := <-events:
			w.apply(ctx, conn.RS, ev)
		case err := <-errc:
			if status.Code(err) == codes.Unimplemented {
				w.log.Info("runtime has no container events, polling", "interval", w.opts.Poll)
				return w.poll(ctx, conn)
			}
			return fmt.Errorf("container events: %w", err)
		case <-resync.C():
			if err := w.Relist(ctx, conn.RS); err != nil {
				return err
			}
		}
	}
}

func (w *Watcher) poll(ctx context.Context, conn *Conn) error {
	t := w.opts.Clock.NewTicker(w.opts.Poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
			if err := w.Relist(ctx, conn.RS); err != nil {
				return err
			}
		}
	}
}

// Relist replaces the view with the runtime's full list. Containers already known keep
// their details; only new or changed ones cost a status call.
func (w *Watcher) Relist(ctx context.Context, rs runtimeapi.RuntimeServiceClient) error {
	// A relist reads every container: bounded as a whole, since a hung runtime would
	// otherwise keep a view that looks connected.
	ctx, cancel := context.WithTimeout(ctx, 3*callTimeout)
	defer cancel()
	sbs, err := rs.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return fmt.Errorf("listing pod sandboxes: %w", err)
	}
	cs, err := rs.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		return fmt.Errorf("listing containers: %w", err)
	}
	w.mu.Lock()
	known, knownPods := w.containers, w.pods
	w.mu.Unlock()
	now := w.opts.Clock.Now()
	pods := make(map[string]*Pod, len(sbs.GetItems()))
	for _, sb := range sbs.GetItems() {
		p := podOf(sb.GetId(), sb.GetMetadata(), sb.GetState(), sb.GetCreatedAt(), sb.GetLabels(), sb.GetAnnotations())
		p.Observed = now
		if old := knownPods[p.SandboxID]; old != nil {
			p.Observed = old.Observed
		}
		pods[sb.GetId()] = p
	}
	containers := make(map[string]*Container, len(cs.GetContainers()))
	sandboxOf := make(map[string]string, len(cs.GetContainers()))
	for _, item := range cs.GetContainers() {
		c := containerOf(item)
		if old, ok := known[c.ID]; ok && old.State == c.State && old.CgroupsPath != "" {
			c = old
		} else if err := containerDetails(ctx, rs, c); err != nil {
			switch {
			case status.Code(err) == codes.NotFound:
				continue // removed between the list and the status
			case errors.Is(err, errUnreadable):
				w.noteUnreadable(c.ID, err) // one container's info, not the whole list
			default:
				return err
			}
		}
		containers[c.ID] = c
		sandboxOf[c.ID] = item.GetPodSandboxId()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for id := range w.unreadable {
		if containers[id] == nil {
			delete(w.unreadable, id)
		}
	}
	// A relist that finds what the events said (at rest, every relist) publishes nothing:
	// a new snapshot wakes a sample and the allocation tracker.
	if last, _ := w.Load(); last.Connected && reflect.DeepEqual(w.pods, pods) && reflect.DeepEqual(w.containers, containers) && maps.Equal(w.sandboxOf, sandboxOf) {
		w.value.Succeeded(w.opts.Clock.Now())
		return nil
	}
	w.pods, w.containers, w.sandboxOf = pods, containers, sandboxOf
	w.publishLocked(true)
	return nil
}

func containerOf(item *runtimeapi.Container) *Container {
	return &Container{
		ID: item.GetId(), Name: item.GetMetadata().GetName(), Attempt: item.GetMetadata().GetAttempt(), Image: item.GetImage().GetImage(),
		ImageRef: item.GetImageRef(), State: stateOf(item.GetState()), CreatedAt: time.Unix(0, item.GetCreatedAt()),
		Annotations: item.GetAnnotations(),
	}
}

// apply updates the view for one event. A failed lookup is left to the next relist.
func (w *Watcher) apply(ctx context.Context, rs runtimeapi.RuntimeServiceClient, ev *runtimeapi.ContainerEventResponse) {
	id, typ := ev.GetContainerId(), ev.GetContainerEventType()
	sb := ev.GetPodSandboxStatus()
	if sb != nil && sb.GetId() == id { // an event about the sandbox itself
		w.mu.Lock()
		defer w.mu.Unlock()
		if typ == runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT {
			delete(w.pods, id)
			for cid, s := range w.sandboxOf {
				if s == id {
					delete(w.containers, cid)
					delete(w.sandboxOf, cid)
				}
			}
		} else {
			w.putPodLocked(podOf(id, sb.GetMetadata(), sb.GetState(), sb.GetCreatedAt(), sb.GetLabels(), sb.GetAnnotations()))
		}
		w.publishLocked(true)
		return
	}
	if typ == runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT {
		w.mu.Lock()
		delete(w.containers, id)
		delete(w.sandboxOf, id)
		w.publishLocked(true)
		w.mu.Unlock()
		return
	}
	c, sandboxID, err := w.fetchContainer(ctx, rs, id)
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case status.Code(err) == codes.NotFound || (err == nil && c == nil):
		delete(w.containers, id)
		delete(w.sandboxOf, id)
	case err != nil:
		w.log.Warn("container event: lookup failed, the next relist repairs it", "container", id, "err", err)
		return
	default:
		w.containers[id], w.sandboxOf[id] = c, sandboxID
		if sb != nil {
			w.putPodLocked(podOf(sb.GetId(), sb.GetMetadata(), sb.GetState(), sb.GetCreatedAt(), sb.GetLabels(), sb.GetAnnotations()))
		}
	}
	w.publishLocked(true)
}

// putPodLocked records a sandbox, observed now unless it was before.
func (w *Watcher) putPodLocked(p *Pod) {
	p.Observed = w.opts.Clock.Now()
	if old := w.pods[p.SandboxID]; old != nil {
		p.Observed = old.Observed
	}
	w.pods[p.SandboxID] = p
}

func (w *Watcher) fetchContainer(ctx context.Context, rs runtimeapi.RuntimeServiceClient, id string) (*Container, string, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := rs.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{Id: id}})
	if err != nil {
		return nil, "", fmt.Errorf("listing container %s: %w", id, err)
	}
	if len(resp.GetContainers()) == 0 {
		return nil, "", nil
	}
	item := resp.GetContainers()[0]
	c := containerOf(item)
	if err := containerDetails(ctx, rs, c); err != nil {
		if !errors.Is(err, errUnreadable) {
			return nil, "", err
		}
		w.noteUnreadable(c.ID, err)
	}
	return c, item.GetPodSandboxId(), nil
}

// noteUnreadable logs, once per container, that its verbose info could not be read. The
// container is kept without a PID or cgroup: its processes count as no container's, and
// nothing is done to it on the strength of what its info claimed.
func (w *Watcher) noteUnreadable(id string, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.unreadable[id] {
		w.unreadable[id] = true
		w.log.Warn("container's verbose info refused: kept without PID or cgroup", "container", id, "err", err)
	}
}

func (w *Watcher) setConnected(connected bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if snap, _ := w.Load(); snap.Connected == connected && snap.Runtime == w.runtime {
		return
	}
	w.publishLocked(connected)
}

func (w *Watcher) countReconnect() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.reconnects++
}

// publishLocked builds a new immutable snapshot from the view.
func (w *Watcher) publishLocked(connected bool) {
	byID := make(map[string]*Pod, len(w.pods))
	snap := &Snapshot{Taken: w.opts.Clock.Now(), Connected: connected, Runtime: w.runtime, Pods: make([]*Pod, 0, len(w.pods))}
	for id, p := range w.pods {
		cp := *p
		cp.Containers = nil
		byID[id] = &cp
		snap.Pods = append(snap.Pods, &cp)
	}
	for cid, c := range w.containers {
		if p := byID[w.sandboxOf[cid]]; p != nil {
			cc := *c
			p.Containers = append(p.Containers, &cc)
		}
	}
	for _, p := range snap.Pods {
		slices.SortFunc(p.Containers, func(a, b *Container) int {
			return cmp.Or(cmp.Compare(a.Name, b.Name), a.CreatedAt.Compare(b.CreatedAt))
		})
	}
	slices.SortFunc(snap.Pods, func(a, b *Pod) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name), cmp.Compare(a.SandboxID, b.SandboxID))
	})
	if connected {
		w.value.Publish(snap.Taken, snap)
		return
	}
	// The last view stays published, marked disconnected; that is no success.
	w.value.PublishFailing(snap, errDisconnected)
}

var errDisconnected = errors.New("container runtime not connected")
