// SPDX-License-Identifier: Apache-2.0

package footprint

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"iter"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/neureality-sdk/nr1-agent/bpf"
	"github.com/neureality-sdk/nr1-agent/internal/cgroupfs"
)

// BPF is the footprint source that runs the task_file and task_vma iterators: one pass
// in the kernel over every task, with only the target files reported back.
type BPF struct {
	fp       *bpf.Footprint
	targets  *Targets
	procRoot string    // for fdinfo values
	lastFull time.Time // the last pass over every process's mappings
	cgroupV2 string    // the cgroup v2 mount, to list a heavy cgroup's processes
	// heavy are the units the last scan found past heavyFDs fds (in one process, or in
	// all of their processes together) or did not walk whole, with the ticks it counted
	// of each: their processes are walked last, one by one after every other process, so
	// that what walking their tables costs is their CGs' alone, however many processes
	// share the flood. A unit is a cgroup, or the pod its groups entry names for it
	// (SetGroups): a flood spread over a pod's containers is the pod's. members are the
	// cgroups of each unit whose processes are walked last.
	heavy    map[uint64]uint64
	members  map[uint64][]uint64
	groups   map[uint64]uint64
	heavyFDs uint64
	// lightWalk is how many fds the units walked first hold together at most (LightWalk).
	lightWalk uint64
	// walked is when each unit found past its walk was last walked; it rests for rest
	// after (HeavyRest).
	walked map[uint64]time.Time
	rest   time.Duration
	// resume is, per unit past its walk, the process its last walk stopped in: the next
	// walk begins after it, so that walk after walk covers every process of the unit.
	resume map[uint64]uint32
	// sockets are, per unit past its walk, the sockets of namespaces no process may be
	// in that its walks met (bpf.KindNetNS), one per namespace: what a neighbour sent to
	// one is read while the unit rests and while its walks cover its other processes.
	sockets map[uint64][]bpf.Record
	// listed is every process as last listed, when the count of processes made was
	// listedAt.
	listed   []uint32
	listedAt uint64
	// unlinked is when each unlinked file the last scan sized was first found, by
	// cgroup and inode.
	unlinked map[[2]uint64]time.Time
}

type hurryKey struct{}

// InAHurry marks ctx as a scan's that a change started: what a change must be judged on
// is read as any scan reads it, and the walk of a unit past its walk, due after its rest,
// is left to the next scan not in a hurry, as long as its rest has not passed twice.
func InAHurry(ctx context.Context) context.Context {
	return context.WithValue(ctx, hurryKey{}, true)
}

func hurried(ctx context.Context) bool {
	h, _ := ctx.Value(hurryKey{}).(bool)
	return h
}

type yieldKey struct{}

// YieldingTo marks ctx as a scan's that came at its time, which leaves the rest of the
// walks of units past their walk to later scans once waiting says a change waits for the
// next: the change is judged without waiting for a flood's walk. A unit whose last walk
// is twice its rest old is walked whatever waits, so that a stream of changes delays no
// walk past that.
func YieldingTo(ctx context.Context, waiting func() bool) context.Context {
	return context.WithValue(ctx, yieldKey{}, waiting)
}

func waiting(ctx context.Context) func() bool {
	w, _ := ctx.Value(yieldKey{}).(func() bool)
	if w == nil {
		return func() bool { return false }
	}
	return w
}

// FullMappingPass is how often a scan walks every process's mappings, not only those of
// the processes that may map a target (FollowMappers): the bound on how long a mapping
// made where no mark sees it stays uncounted: a 32-bit mmap by a 64-bit process (x86's
// int 0x80, which the syscall tracepoints skip), an fd replaced by another thread
// between mmap's entry and the kernel's lookup of it, a file mapped through a stacking
// filesystem (overlayfs maps the file below the one opened). A pass over every process
// costs about 50 ms on a node of 100 pods, so once every 5 minutes is 0.02 % of a core.
const FullMappingPass = 5 * time.Minute

// FollowMappers makes scans walk the mappings of the processes that may map a target
// only, with every process's walked every FullMappingPass; an error leaves every scan
// walking every process.
func (b *BPF) FollowMappers() error { return b.fp.FollowMappers() }

// ErrUnattributable is a BPF source that loads but cannot tell which cgroup a process
// is in: every record would be unattributed, so it is refused.
var ErrUnattributable = errors.New("the BPF footprint source cannot attribute processes to cgroups on this node")

// NewBPF loads the iterators and checks that they attribute: an error means the kernel
// cannot run them, or they cannot tell cgroups apart here, and procfs must be used.
func NewBPF(procRoot, cgroupV2 string, targets *Targets) (*BPF, error) {
	fp, err := bpf.LoadFootprint()
	if err != nil {
		return nil, err
	}
	if err := checkAttribution(fp, procRoot, cgroupV2); err != nil {
		_ = fp.Close()
		return nil, err
	}
	if err := fp.SetTargets(targets.Keys()); err != nil {
		_ = fp.Close()
		return nil, err
	}
	return &BPF{fp: fp, targets: targets, procRoot: procRoot, cgroupV2: cgroupV2, heavyFDs: HeavyFDs, lightWalk: LightWalk, rest: HeavyRest}, nil
}

// checkAttribution holds a file of its own as the only target and runs the iterator:
// the cgroup id it reports for this process must be the id of the v2 cgroup procfs
// names for it. A kernel whose tasks' default cgroup is not that tree (cgroup v2 not
// mounted, ids of 0) fails here instead of leaving everything unattributed.
func checkAttribution(fp *bpf.Footprint, procRoot, cgroupV2 string) error {
	if cgroupV2 == "" {
		return fmt.Errorf("%w: no cgroup v2 hierarchy", ErrUnattributable)
	}
	want, err := (&Procfs{cgroupV2: cgroupV2}).cgroupID(&scanState{ids: map[string]uint64{}}, filepath.Join(procRoot, strconv.Itoa(os.Getpid())))
	if err != nil {
		return fmt.Errorf("%w: the agent's own cgroup: %w", ErrUnattributable, err)
	}
	// A memfd: the agent's image has no writable directory to make a file in.
	probe, err := unix.MemfdCreate("nr1-footprint-probe", unix.MFD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("attribution probe: %w", err)
	}
	defer unix.Close(probe)
	var st unix.Stat_t
	if err := unix.Fstat(probe, &st); err != nil {
		return fmt.Errorf("attribution probe: %w", err)
	}
	const probeTarget = 0
	if err := fp.SetTargets(map[bpf.TargetKey]uint32{{Ino: st.Ino, Dev: bpf.KernelDev(st.Dev)}: probeTarget}); err != nil {
		return err
	}
	var got []uint64
	pid := uint32(os.Getpid()) //nolint:gosec // a PID fits
	if err := fp.Files(func(r *bpf.Record) error {
		if r.Kind == bpf.KindFD && r.Pid == pid && r.Target == probeTarget {
			got = append(got, r.CgroupId)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("attribution probe: %w", err)
	}
	if len(got) != 1 || got[0] != want || want == 0 {
		return fmt.Errorf("%w: it reports cgroup ids %v for the agent, whose v2 cgroup id is %d", ErrUnattributable, got, want)
	}
	return nil
}

// SetHeavyFDs sets how many fds make a process, or a cgroup's processes together, heavy
// (Scan.Heavy), HeavyFDs until set.
func (b *BPF) SetHeavyFDs(n uint64) error {
	if err := b.fp.SetHeavyFDs(n); err != nil {
		return err
	}
	b.heavyFDs = n
	return nil
}

// SetGroups names, for each cgroup of a pod (by id), the pod's cgroup: the cgroups of a
// pod are one unit for the fds the next scans walk of them, so that a flood spread over
// a pod's containers, each below HeavyFDs, is as heavy as in one of them. A cgroup not
// named is a unit of its own. The map is kept; it is read during a scan.
func (b *BPF) SetGroups(groups map[uint64]uint64) { b.groups = groups }

// unitOf is the unit whose walk cgroup's processes count in.
func (b *BPF) unitOf(cgroup uint64) uint64 {
	if u, ok := b.groups[cgroup]; ok {
		return u
	}
	return cgroup
}

// Name is "bpf".
func (b *BPF) Name() string { return "bpf" }

// Close unloads the programs.
func (b *BPF) Close() error { return b.fp.Close() }

// Scan runs both iterators. When ctx ends, the iterators stop where they are and the
// scan says up to which PID it is complete (Scan.Cutoff); the mappings' pass gets half
// the time left, so that a flood of mappings leaves time for the handles.
func (b *BPF) Scan(ctx context.Context) (*Scan, error) {
	start, began := time.Now(), monotonic()
	s := &Scan{Source: b.Name()}
	ph := &phases{at: start}
	targets := len(b.targets.list)
	vctx := ctx
	if deadline, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		vctx, cancel = context.WithDeadline(ctx, start.Add(time.Until(deadline)/2))
		defer cancel()
	}
	vmas := b.fp.MapperVMAs
	if start.Sub(b.lastFull) >= FullMappingPass {
		vmas = func(fn func(*bpf.Record) error) (bpf.MapperPass, error) {
			return bpf.MapperPass{Full: "the backstop"}, b.fp.VMAs(fn)
		}
	}
	n := 0
	pass, err := vmas(func(r *bpf.Record) error {
		if n++; n%1024 == 0 && vctx.Err() != nil {
			s.Cutoff = int(r.Pid)
			return errOutOfTime
		}
		switch r.Kind {
		case bpf.KindTick: // a walk that writes nothing else is seen to take its time
			if vctx.Err() != nil {
				s.Cutoff = int(r.Pid)
				return errOutOfTime
			}
			return nil
		case bpf.KindRegistered: // with a ring held by a mapping of its queues
			h, err := handleOf(r, targets)
			if err == nil {
				s.Handles = append(s.Handles, h)
			}
			return err
		case bpf.KindRingMore, bpf.KindRingLayout, bpf.KindPastCap:
			return s.unread(r, targets)
		}
		m, err := mappingOf(r, targets)
		if err == nil {
			if b.targets.At(m.Target).Measure == OpenHandles {
				m.Description = r.File // the same description as its fds', if any remain
			}
			s.Mappings = append(s.Mappings, m)
		}
		return err
	})
	if err != nil && !errors.Is(err, errOutOfTime) {
		return nil, fmt.Errorf("bpf footprint: %w", err)
	}
	if pass.Full != "" && err == nil {
		b.lastFull = start
	}
	ph.done(PhaseMappings)
	var foreign, members, unlinked []bpf.Record
	// A pod can hold as many unlinked files as it can make: one past what is sized per
	// cgroup is kept, to name the cgroup, and the rest dropped as they come.
	unlinkedOf := map[uint64]int{}
	files := b.fp.Files
	last, listed := b.heavyProcesses()
	var listing error
	ph.done(PhaseMembers)
	// The heavy processes are walked last, their units smallest first (by the ticks the
	// last scan counted of each), and each heavy unit walks HeavyWalk of its fds at most,
	// counted by its ticks: past that it is unfinished, by its own doing, and its other
	// processes are passed over. A flood costs a scan that much, whatever its size, and no
	// other heavy unit its walk; a unit whose processes hold up to that many is read whole
	// at every scan.
	tail := b.tailOrder(last)
	inTail := false
	walkedOf := map[uint64]uint64{} // per heavy unit, its ticks in the tail
	spent := map[uint64]bool{}      // the heavy units past HeavyWalk
	stopped := map[uint64]uint32{}  // per unit past HeavyWalk, the process its walk stopped in
	// A unit the last scan found past its walk rests (HeavyRest) after each walk: until
	// then it is passed over whole, unfinished by its doing as it would be walked. A scan
	// in a hurry (InAHurry) leaves the walk to the next scan, up to twice the rest: a
	// change waits for no flood's walk, and a stream of changes delays none past that.
	rest := b.rest
	if hurried(ctx) {
		rest *= 2
	}
	for u, at := range b.walked {
		if pastWalk(b.heavy[u]) && start.Sub(at) < rest {
			spent[u] = true
		}
	}
	// A scan at its time yields the walks of units past theirs, walked within twice their
	// rest, to a change waiting (YieldingTo): those are spent as a hurried scan leaves
	// them, and keep the time of their last walk.
	changed := waiting(ctx)
	yielded := map[uint64]bool{}
	yields := func(u uint64) bool {
		if !yielded[u] {
			at, ok := b.walked[u]
			if !ok || !pastWalk(b.heavy[u]) || start.Sub(at) >= 2*b.rest || !changed() {
				return false
			}
			yielded[u], spent[u] = true, true
		}
		return true
	}
	handed := map[uint64]uint32{} // per unit, the last of its processes handed to the walk
	skip := func(pid uint32) bool {
		u := last[pid]
		if spent[u] {
			return true
		}
		if yields(u) {
			// Yielded between two of its processes: the next walk goes on after the last
			// one walked, as after one cut within.
			if prev, ok := handed[u]; ok && stopped[u] == 0 {
				stopped[u] = prev
			}
			return true
		}
		handed[u] = pid
		return false
	}
	if len(last) > 0 {
		files = func(fn func(*bpf.Record) error) error {
			return b.fp.FilesOf(heavyLast(b.processes, last, tail, &listing, func() { inTail = true; ph.done(PhaseFDs) }, skip), fn)
		}
	}
	expired := func() bool { return ctx.Err() != nil }
	heavy := map[uint64]uint64{}
	// ticks counts, per unit, the ticks met while its processes were walked: about one
	// per bpf.Tick fds, so that a flood spread over many processes is seen as one; met
	// names the cgroups each unit's ticks were met in.
	ticks := map[uint64]uint64{}
	met := map[uint64]map[uint64]bool{}
	meet := func(cgroup uint64) uint64 {
		u := b.unitOf(cgroup)
		if met[u] == nil {
			met[u] = map[uint64]bool{}
		}
		met[u][cgroup] = true
		return u
	}
	// out stops the walk at r: among the processes walked last, settleCut says which
	// units from r's on are unfinished and which unreached; anywhere else, the processes
	// from r's on are not read.
	cutLast := -1 // the position in tail of the heavy process the time ran out on
	out := func(r *bpf.Record) error {
		if _, ok := last[r.Pid]; ok && s.Cutoff == 0 {
			cutLast = slices.Index(tail, r.Pid)
		} else {
			s.Cutoff = int(r.Pid)
		}
		return errOutOfTime
	}
	err = files(func(r *bpf.Record) error {
		if _, ok := last[r.Pid]; s.Cutoff != 0 && int(r.Pid) >= s.Cutoff && !ok {
			return errOutOfTime // beyond what the mappings' pass read
		}
		if n++; n%1024 == 0 && expired() {
			return out(r)
		}
		switch r.Kind {
		case bpf.KindTick:
			ticks[meet(r.CgroupId)]++
			if expired() {
				return out(r)
			}
			if u, ok := last[r.Pid]; ok && inTail {
				if walkedOf[u]++; pastWalk(walkedOf[u]) || yields(u) {
					spent[u] = true
					stopped[u] = r.Pid
					return bpf.ErrNextProcess
				}
			}
			return nil
		case bpf.KindHeavy:
			s.Heavy = append(s.Heavy, meet(r.CgroupId))
			return nil
		case bpf.KindNetNS:
			foreign = append(foreign, *r)
			return nil
		case bpf.KindNetNSMember:
			members = append(members, *r)
			return nil
		case bpf.KindUnlinked:
			if unlinkedOf[r.CgroupId]++; unlinkedOf[r.CgroupId] <= MaxUnlinked+1 {
				unlinked = append(unlinked, *r)
			}
			return nil
		case bpf.KindRingMore, bpf.KindRingLayout, bpf.KindPastCap:
			return s.unread(r, targets)
		}
		h, err := handleOf(r, targets)
		if err == nil {
			s.Handles = append(s.Handles, h)
		}
		return err
	})
	if err == nil {
		err = listing
	}
	if err != nil && !errors.Is(err, errOutOfTime) {
		return nil, fmt.Errorf("bpf footprint: %w", err)
	}
	if inTail {
		ph.done(PhaseHeavy)
	} else {
		ph.done(PhaseFDs)
	}
	if errors.Is(err, errOutOfTime) {
		if s.Cutoff != 0 {
			cutLast = -1
		}
		// A walk the time cut resumes after the process it was cut in, as one its
		// budget ended does.
		if cutLast >= 0 {
			if u := last[tail[cutLast]]; stopped[u] == 0 {
				stopped[u] = tail[cutLast]
			}
		}
		s.Unreached = settleCut(tail, last, cutLast, b.heavy, b.heavyFDs/bpf.Tick, spent)
	}
	for cgroup := range spent {
		s.Unfinished = append(s.Unfinished, cgroup)
	}
	for _, l := range []*[]uint64{&s.Unfinished, &s.Unreached} {
		slices.Sort(*l)
		*l = slices.Compact(*l)
	}
	for u, n := range ticks {
		if n*bpf.Tick >= b.heavyFDs && !slices.Contains(s.Heavy, u) {
			s.Heavy = append(s.Heavy, u)
		}
	}
	// A unit not walked whole this scan is left out: its ticks are what the cut let be
	// walked of it, and it is walked last anyway.
	s.Heavy = append(s.Heavy, pastLightWalk(ticks, slices.Concat(s.Heavy, s.Unfinished, s.Unreached), b.lightWalk/bpf.Tick)...)
	walkedLast := map[uint64][]uint64{}
	for _, u := range slices.Concat(s.Heavy, s.Unfinished, s.Unreached) {
		if _, again := heavy[u]; again {
			continue
		}
		// A unit not walked whole keeps what the last scan counted of it, if more: its
		// place in the tail is its size, not how much of it a cut let be walked.
		heavy[u] = max(ticks[u], 1)
		if slices.Contains(s.Unfinished, u) || slices.Contains(s.Unreached, u) {
			heavy[u] = max(heavy[u], b.heavy[u])
		}
		// The cgroups met this scan, and those walked last in the last one that still
		// have processes: a unit past its walk passes them over, so they meet no tick.
		for cgroup := range met[u] {
			walkedLast[u] = append(walkedLast[u], cgroup)
		}
		for _, cgroup := range b.members[u] {
			if !met[u][cgroup] && listed[cgroup] {
				walkedLast[u] = append(walkedLast[u], cgroup)
			}
		}
	}
	walked := map[uint64]time.Time{}
	for u := range spent {
		if walkedOf[u] > 0 && !yielded[u] {
			walked[u] = start
		} else if at, ok := b.walked[u]; ok {
			walked[u] = at
		}
	}
	// Units not walked whole: past their walk, or not reached before the time ran out.
	// Each keeps where its walks are, and the sockets they showed: those are read while
	// it rests, and while its next walks cover its other processes, through the holder
	// that named each as long as it still holds a socket of that namespace (enterForeign
	// checks).
	partial := maps.Clone(spent)
	for _, u := range s.Unreached {
		partial[u] = true
	}
	resume := map[uint64]uint32{}
	for u := range partial {
		if pid, ok := stopped[u]; ok {
			resume[u] = pid
		} else if pid, ok := b.resume[u]; ok {
			resume[u] = pid
		}
	}
	remembered := b.remembered(partial)
	b.heavy, b.members, b.walked, b.resume = heavy, walkedLast, walked, resume
	// Handles passed over a unix socket and closed by their sender are still open, held
	// in flight: they count for the sender's cgroup, or the nearest ancestor of it that is
	// a pod's when the sender's container is gone. No process holds them, so
	// they are read whatever the cutoff, with a time of their own: what is left of the
	// scan's, a quarter of it at least (beside a flood the walks before it stop early,
	// leaving most of it, which a node short of CPU needs). A pass cut short leaves every
	// CG's handles a lower bound.
	ictx := context.WithoutCancel(ctx)
	if deadline, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		ictx, cancel = context.WithTimeout(ictx, max(time.Until(deadline), deadline.Sub(start)/4, time.Millisecond))
		defer cancel()
	}
	// A process left unwalked (a cut walk, a heavy cgroup past its budget) may be the only
	// one in its namespace, where a socket can hold what a neighbour sent, which counts for
	// the sender: the kernel names every task's namespace then, a lookup per task whatever
	// its fds, where /proc would cost a read per process.
	complete := s.Cutoff == 0 && len(s.Unfinished) == 0 && len(s.Unreached) == 0
	if !complete {
		complete = b.fp.Namespaces(func(r *bpf.Record) error {
			members = append(members, *r)
			return nil
		}) == nil
	}
	namespaces := b.memberNamespaces(members, complete)
	entered, unreadable, failed := enterForeign(namespaces, foreign, remembered)
	defer entered.Close()
	b.remember(partial, foreign, remembered, failed)
	s.InFlightForeign = append(s.InFlightForeign, unreadable...)
	ph.done(PhaseNamespaces)
	n = 0
	err = b.fp.InFlight(ictx, append(namespaces.paths, entered.paths...), func(r *bpf.Flight) error {
		if n++; n%1024 == 0 && ictx.Err() != nil {
			return errOutOfTime
		}
		switch r.Kind {
		// What a sender's messages hold past what a scan reads is its pod's too once its
		// container is gone: the ancestors are named with it (each is the same pod's, or
		// no CG's).
		case bpf.KindInFlightMore:
			s.InFlightUnread = append(s.InFlightUnread, r.CgroupId)
			s.InFlightUnread = appendChain(s.InFlightUnread, r.Up)
			return nil
		case bpf.KindPastCap:
			for _, id := range appendChain(nil, r.Up) {
				up := r.Record
				up.CgroupId = id
				if err := s.unread(&up, targets); err != nil {
					return err
				}
			}
			return s.unread(&r.Record, targets)
		}
		h, err := inFlightOf(r, targets)
		if err == nil {
			s.Handles = append(s.Handles, h)
		}
		return err
	})
	switch {
	case errors.Is(err, errOutOfTime) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, bpf.ErrInFlightFull):
		s.InFlightCut = true
	case err != nil:
		return nil, fmt.Errorf("bpf footprint: %w", err)
	}
	ph.done(PhaseInFlight)
	if err := s.dropExited(b.procRoot, func() (map[uint64]bool, error) { return opened(b.fp) }); err != nil {
		return nil, fmt.Errorf("bpf footprint: %w", err)
	}
	if s.Cutoff == 0 && len(s.Unfinished) == 0 && len(s.Unreached) == 0 && !s.InFlightCut {
		if err := s.heldElsewhere(b.fp, targets, began); err != nil {
			return nil, fmt.Errorf("bpf footprint: %w", err)
		}
	}
	fillFdinfo(b.procRoot, b.targets, s)
	b.unlinked = s.sizeUnlinked(b.procRoot, unlinked, b.unlinked, start)
	ph.done(PhaseAfter)
	s.Phases = ph.list
	s.Took = time.Since(start)
	return s, nil
}

// dropExited drops the fds and mappings of the processes that exited while the scan
// walked on: a process is walked at one moment, the others at theirs, and a worker that
// exits holding a queue while its replacement (a pool's next worker, a higher PID) starts
// would otherwise count twice, putting a CG at its booking over it. An exited process
// holds nothing now; but a description is reported once per cgroup, through the first
// of its processes walked, and another may hold it still: one the kernel has not
// released (held, from the descriptions opened, asked only when an fd is dropped) is
// kept, as held by no process.
func (s *Scan) dropExited(procRoot string, held func() (map[uint64]bool, error)) error {
	gone := map[int]bool{}
	exited := func(pid int) bool {
		if pid == 0 {
			return false // in flight, or held by the kernel: no process
		}
		g, ok := gone[pid]
		if !ok {
			g = !running(procRoot, pid)
			gone[pid] = g
		}
		return g
	}
	s.Mappings = slices.DeleteFunc(s.Mappings, func(m Mapping) bool { return exited(m.PID) })
	if !slices.ContainsFunc(s.Handles, func(h Handle) bool { return exited(h.PID) }) {
		return nil
	}
	still, err := held()
	if err != nil {
		return err
	}
	kept := s.Handles[:0]
	for _, h := range s.Handles {
		if exited(h.PID) {
			if !still[h.Description] {
				continue
			}
			h.PID, h.FD = 0, -1
		}
		kept = append(kept, h)
	}
	s.Handles = kept
	return nil
}

// opened is the descriptions the kernel has not released of those opened since the
// footprint was loaded.
func opened(fp *bpf.Footprint) (map[uint64]bool, error) {
	out := map[uint64]bool{}
	err := fp.Opened(func(o bpf.Opened) error {
		out[o.File] = true
		return nil
	})
	return out, err
}

// running says process pid is there and has not exited: a zombie has let go of its files
// and memory.
func running(procRoot string, pid int) bool {
	b, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return true // not a stat line: not known to be gone
	}
	return b[i+2] != 'Z' && b[i+2] != 'X'
}

// heldElsewhere adds the descriptions held where no walk finds them (by the kernel for a
// process: an io_uring request pending on one, a read blocked on one whose fd another
// thread closed) for the cgroup of their opener, or its nearest ancestor that is a pod's
// once its container is gone: the opener put it there. Only a scan that read every
// process and socket can tell such a description from one an unread fd holds.
// A description opened since the scan began (since) is not: the walk may have passed
// its fd before it was made, a pool's next worker's, and the next scan finds it there.
func (s *Scan) heldElsewhere(fp *bpf.Footprint, targets int, since uint64) error {
	seen := make(map[uint64]bool, len(s.Handles))
	for _, h := range s.Handles {
		seen[h.Description] = true
	}
	for _, m := range s.Mappings {
		if m.Description != 0 {
			seen[m.Description] = true
		}
	}
	return fp.Opened(func(o bpf.Opened) error {
		if seen[o.File] || o.At >= since {
			return nil
		}
		if int64(o.Target) >= int64(targets) {
			return fmt.Errorf("a description opened of a target outside the %d given: %+v", targets, o)
		}
		s.Handles = append(s.Handles, Handle{CgroupID: o.Who[0], Up: [3]uint64(o.Who[1:]), FD: -1, Target: int(o.Target), Description: o.File})
		s.Elsewhere++
		return nil
	})
}

// sizeUnlinked sizes the unlinked files the walk met through the fds that hold them,
// MaxUnlinked per cgroup at most: a cgroup holding more is named in UnlinkedUnread. A
// file whose fd has gone, or now names another file, since the walk is skipped, as a
// process gone is. since is when the last scan's were first found; it returns this
// scan's, a file first found now found at now.
func (s *Scan) sizeUnlinked(procRoot string, records []bpf.Record, since map[[2]uint64]time.Time, now time.Time) map[[2]uint64]time.Time {
	found := map[[2]uint64]time.Time{}
	sized := map[uint64]int{}
	for _, r := range records {
		if sized[r.CgroupId] == MaxUnlinked {
			s.UnlinkedUnread = append(s.UnlinkedUnread, r.CgroupId)
			sized[r.CgroupId]++ // named once
			continue
		}
		if sized[r.CgroupId] > MaxUnlinked {
			continue
		}
		sized[r.CgroupId]++
		var st unix.Stat_t
		fd := filepath.Join(procRoot, strconv.FormatUint(uint64(r.Pid), 10), "fd", strconv.FormatUint(uint64(r.Fd), 10))
		if err := unix.Stat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink != 0 {
			continue
		}
		key := [2]uint64{r.CgroupId, r.File}
		first, ok := since[key]
		if !ok {
			first = now
		}
		found[key] = first
		s.Unlinked = append(s.Unlinked, Unlinked{CgroupID: r.CgroupId, Inode: r.File, Bytes: st.Blocks * 512, Since: first})
	}
	return found
}

// settleCut names the heavy units a walk that ran out of time did not read whole,
// walking tail (each process's unit in last) from the process at cut on, or all of it
// when the time ran out before the tail (cut -1), the node's time. The unit whose walk
// was cut is unfinished (marked in spent) when it is heavy by its own size (own ticks,
// HeavyFDs, or more): its table took the time, walked after every smaller one. A unit
// below it, named by the light walk and walked after every heavy one, is unreached: the
// time was its and its neighbours' together. So is each one the last scan found past its
// walk (ticks, the last scan's of each): it would be again, by its doing. It returns the
// others, read whole last time, which are unreached.
func settleCut(tail []uint32, last map[uint32]uint64, cut int, ticks map[uint64]uint64, own uint64, spent map[uint64]bool) []uint64 {
	from := max(cut, 0)
	if cut >= 0 && ticks[last[tail[cut]]] >= own {
		spent[last[tail[cut]]] = true
	}
	var unreached []uint64
	for _, pid := range tail[from:] {
		switch cgroup := last[pid]; {
		case spent[cgroup]:
		case pastWalk(ticks[cgroup]):
			spent[cgroup] = true
		default:
			unreached = append(unreached, cgroup)
		}
	}
	return unreached
}

// pastLightWalk are the units, largest first, that the walk before the heavy ones must
// leave to them for the rest to hold budget ticks at most: ticks counts each unit's, heavy
// names those already walked last. Ties go to the higher id, so that the same units are
// named scan after scan.
func pastLightWalk(ticks map[uint64]uint64, heavy []uint64, budget uint64) []uint64 {
	var light []uint64
	total := uint64(0)
	for u, n := range ticks {
		if !slices.Contains(heavy, u) {
			light = append(light, u)
			total += n
		}
	}
	slices.SortFunc(light, func(x, y uint64) int { return cmp.Or(cmp.Compare(ticks[y], ticks[x]), cmp.Compare(y, x)) })
	var past []uint64
	for _, u := range light {
		if total <= budget {
			break
		}
		past = append(past, u)
		total -= ticks[u]
	}
	return past
}

// pastWalk says a unit whose walk met so many ticks walked more than HeavyWalk fds: a
// tick comes every bpf.Tick objects walked, the first of a unit's any time after its
// walk begins, so one more than HeavyWalk's is past it, and a unit whose processes hold
// HeavyWalk fds is read whole.
func pastWalk(ticks uint64) bool { return ticks > HeavyWalk/bpf.Tick }

// tailOrder is the order the processes of heavy are walked in: the units heavy by their
// own size (HeavyFDs) first, then those the light walk named (LightWalk); each kind by
// the ticks the last scan counted of each unit, fewest first, then by PID, from the
// first after the one the unit's last walk stopped in (those up to it after the others).
// Units below the threshold, however many, then never take a heavy unit's time: the cut
// of a walk is the cut unit's doing only where every unit before it was smaller.
func (b *BPF) tailOrder(heavy map[uint32]uint64) []uint32 {
	tail := slices.Collect(maps.Keys(heavy))
	after := func(pid uint32) int {
		if r, ok := b.resume[heavy[pid]]; ok && pid <= r {
			return 1
		}
		return 0
	}
	named := func(u uint64) int {
		if b.heavy[u] < b.heavyFDs/bpf.Tick {
			return 1
		}
		return 0
	}
	slices.SortFunc(tail, func(x, y uint32) int {
		cx, cy := heavy[x], heavy[y]
		return cmp.Or(cmp.Compare(named(cx), named(cy)), cmp.Compare(b.heavy[cx], b.heavy[cy]), cmp.Compare(cx, cy), cmp.Compare(after(x), after(y)), cmp.Compare(x, y))
	})
	return tail
}

// heavyProcesses are the processes of the units the last scan found heavy, each with
// its unit, as their member cgroups list them now, and the member cgroups listed. A
// cgroup gone, or that cannot be read, is walked in its processes' order.
func (b *BPF) heavyProcesses() (map[uint32]uint64, map[uint64]bool) {
	if len(b.heavy) == 0 || b.cgroupV2 == "" {
		return nil, nil
	}
	procs, listed := map[uint32]uint64{}, map[uint64]bool{}
	var pids []int
	for u := range b.heavy {
		for _, cgroup := range b.members[u] {
			var err error
			if pids, err = cgroupfs.ProcsOf(b.cgroupV2, cgroup, pids[:0]); err != nil {
				continue
			}
			// A unit is its cgroup's now: the pod's cgroup may have become known since.
			listed[cgroup] = len(pids) > 0
			for _, pid := range pids {
				procs[uint32(pid)] = b.unitOf(cgroup) //nolint:gosec // a PID fits
			}
		}
	}
	return procs, listed
}

// heavyLast names the processes list gives, in PID order, but those of heavy, then
// those of tail in its order, calling begin before the first of them and leaving out
// those skip names. The others are listed again once walked: a process made while they
// were walked is walked before the heavy ones too. A listing that fails sets *failed.
func heavyLast(list func() ([]uint32, error), heavy map[uint32]uint64, tail []uint32, failed *error, begin func(), skip func(uint32) bool) iter.Seq[uint32] {
	return func(yield func(uint32) bool) {
		walked := map[uint32]bool{}
		for range 2 {
			pids, err := list()
			if err != nil {
				*failed = err
				return
			}
			slices.Sort(pids)
			for _, pid := range pids {
				if _, last := heavy[pid]; last || walked[pid] {
					continue
				}
				walked[pid] = true
				if !yield(pid) {
					return
				}
			}
		}
		begin()
		for _, pid := range tail {
			if skip(pid) {
				continue
			}
			if !yield(pid) {
				return
			}
		}
	}
}

// processes lists every process, from the kernel's tasks (bpf.Footprint.Processes), or
// as last listed while no process was made since (bpf.Footprint.ProcessesMade): a task
// costs microseconds, and a node runs thousands, where processes are made now and then.
// A process gone since is named still, and its walk finds nothing.
func (b *BPF) processes() ([]uint32, error) {
	made, counted, err := b.fp.ProcessesMade()
	if err != nil {
		return nil, err
	}
	if counted && b.listed != nil && made == b.listedAt {
		return slices.Clone(b.listed), nil
	}
	var pids []uint32
	if err := b.fp.Processes(func(pid uint32) error {
		pids = append(pids, pid)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("listing processes: %w", err)
	}
	if counted {
		// Counted before the listing: one made while it ran moves the count.
		b.listed, b.listedAt = slices.Clone(pids), made
	}
	return pids, nil
}

// unread notes a record of what a scan did not read: a ring's files (by the cgroup's
// doing, or the node's when the ring's layout is unknown), or the distinct targets past
// a cap.
func (s *Scan) unread(r *bpf.Record, targets int) error {
	switch r.Kind {
	case bpf.KindRingMore:
		s.RingUnread = append(s.RingUnread, r.CgroupId)
	case bpf.KindRingLayout:
		s.RingLayout = append(s.RingLayout, r.CgroupId)
	case bpf.KindPastCap:
		if int64(r.Target) >= int64(targets) {
			return fmt.Errorf("a record past a cap of a target outside the %d given: %+v", targets, *r)
		}
		s.PastCap = append(s.PastCap, PastCap{CgroupID: r.CgroupId, Target: int(r.Target)})
	}
	return nil
}

// maxPID is PID_MAX_LIMIT, the largest process ID Linux hands out.
const maxPID = 1 << 22

// mappingOf checks a task_vma record: a mapping of a target, page-aligned, within the
// address space, of a file range that ends within the largest file offset. A record the
// iterators could not have written (a target they were not given, a range past the end
// of the address space or of a file) means the program and this decoder disagree: the
// scan fails, naming the record, rather than count what it says or index past the
// targets. No sample is then taken, and an unknown is never acted on.
func mappingOf(r *bpf.Record, targets int) (Mapping, error) {
	page := uint64(1) << pageShift
	switch {
	case r.Kind != bpf.KindVMA || int64(r.Target) >= int64(targets) || r.Pid == 0 || r.Pid > maxPID:
	case r.Size == 0 || r.Start%page != 0 || r.Size%page != 0 || r.Start+r.Size < r.Start:
	case r.Pgoff > math.MaxInt64>>pageShift || r.Size > math.MaxInt64-r.Pgoff<<pageShift:
	default:
		return Mapping{CgroupID: r.CgroupId, PID: int(r.Pid), Target: int(r.Target), Start: r.Start, Size: r.Size, Offset: r.Pgoff << pageShift}, nil
	}
	return Mapping{}, fmt.Errorf("a mapping record no mapping of %d targets can have: %+v", targets, *r)
}

// handleOf checks a task_file record: an fd of a target, with its open file
// description, or a target registered with an io_uring (no fd of its own).
func handleOf(r *bpf.Record, targets int) (Handle, error) {
	if (r.Kind != bpf.KindFD && r.Kind != bpf.KindRegistered) || int64(r.Target) >= int64(targets) || r.Pid == 0 || r.Pid > maxPID || r.Fd > math.MaxInt32 || r.File == 0 {
		return Handle{}, fmt.Errorf("an fd record no fd of %d targets can have: %+v", targets, *r)
	}
	h := Handle{CgroupID: r.CgroupId, PID: int(r.Pid), FD: int(r.Fd), Target: int(r.Target), Description: r.File}
	if r.Kind == bpf.KindRegistered {
		h.FD = -1
	}
	return h, nil
}

// appendChain appends the ancestors a record names, nearest first, up to the first 0.
func appendChain(ids []uint64, up [3]uint64) []uint64 {
	for _, id := range up {
		if id == 0 {
			break
		}
		ids = append(ids, id)
	}
	return ids
}

// inFlightOf checks a unix iterator record: a file of a target in flight, with its open
// file description, no process, and its sender's cgroup with the nearest ancestors.
func inFlightOf(r *bpf.Flight, targets int) (Handle, error) {
	if r.Kind != bpf.KindInFlight || int64(r.Target) >= int64(targets) || r.Pid != 0 || r.File == 0 {
		return Handle{}, fmt.Errorf("an in-flight record no file in flight of %d targets can have: %+v", targets, *r)
	}
	return Handle{CgroupID: r.CgroupId, Up: r.Up, FD: -1, Target: int(r.Target), Description: r.File}, nil
}

// namespaces are network namespaces to read sockets in: paths to open, and the inode
// numbers of those named.
type namespaces struct {
	paths []string
	inos  map[uint64]bool
	fds   []int
}

// Close closes the namespaces' fds taken from other processes.
func (ns *namespaces) Close() {
	for _, fd := range ns.fds {
		_ = unix.Close(fd)
	}
}

// memberNamespaces names each network namespace a process is in through the process
// the iterator named for it: one link read per namespace, where netNamespaces reads one
// per process, and no descriptor held (a pod may make thousands of namespaces). The
// link must name the namespace the kernel named (the process may be gone and its PID
// reused); another process named for the same namespace is tried then. When members
// may lack a namespace (complete false), or one cannot be named so by any, every
// process's namespace is read from /proc instead.
func (b *BPF) memberNamespaces(members []bpf.Record, complete bool) *namespaces {
	if !complete {
		return netNamespaces(b.procRoot)
	}
	ns := &namespaces{inos: map[uint64]bool{}}
	unnamed := map[uint64]bool{} // namespaces no process named could be opened through yet
	for _, r := range members {
		if ns.inos[r.File] {
			continue
		}
		p := filepath.Join(b.procRoot, strconv.FormatUint(uint64(r.Pid), 10), "ns", "net")
		if ino, err := netnsLink(p); err != nil || ino != r.File {
			unnamed[r.File] = true // another process named for it may do
			continue
		}
		delete(unnamed, r.File)
		ns.inos[r.File] = true
		ns.paths = append(ns.paths, p)
	}
	if len(unnamed) > 0 {
		return netNamespaces(b.procRoot)
	}
	return ns
}

// netnsLink is the inode number of the network namespace a /proc/PID/ns/net link
// names: its text says it ("net:[4026531840]"), cheaper than a stat.
func netnsLink(p string) (uint64, error) {
	link, err := os.Readlink(p)
	if err != nil {
		return 0, fmt.Errorf("network namespace: %w", err)
	}
	ino, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(link, "net:["), "]"), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("network namespace of %s: %w", p, err)
	}
	return ino, nil
}

// netNamespaces names each network namespace a process is in, once (by one of its
// processes): a unix socket is seen only from its own namespace, and each pod has its
// own. A process gone while it is looked at is skipped.
func netNamespaces(procRoot string) *namespaces {
	ns := &namespaces{inos: map[uint64]bool{}}
	entries, err := os.ReadDir(procRoot)
	if err != nil {
		return ns
	}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		p := filepath.Join(procRoot, e.Name(), "ns", "net")
		ino, err := netnsLink(p)
		if err != nil || ns.inos[ino] {
			continue
		}
		ns.inos[ino] = true
		ns.paths = append(ns.paths, p)
	}
	return ns
}

// rememberedSockets bounds the namespaces remembered of one unit: a pod can make as many
// as it can hold sockets of, and past this its walks name them again as they meet them.
const rememberedSockets = 256

// remembered are the sockets the walks of the units in partial showed in earlier scans.
// Each is tried after this scan's own records, so one naming a namespace this scan named
// too costs nothing once the namespace is entered, and still answers when this scan's
// holder of it does not.
func (b *BPF) remembered(partial map[uint64]bool) []bpf.Record {
	var out []bpf.Record
	for u := range partial {
		out = append(out, b.sockets[u]...)
	}
	return out
}

// remember keeps, for each unit in partial, the sockets of namespaces its processes
// showed in this scan, then those remembered, that did not fail, one per namespace, up
// to rememberedSockets; a unit walked whole forgets its own.
func (b *BPF) remember(partial map[uint64]bool, foreign, remembered []bpf.Record, failed map[bpf.Record]bool) {
	sockets := map[uint64][]bpf.Record{}
	held := map[uint64]map[uint64]bool{}
	for _, r := range slices.Concat(foreign, remembered) {
		u := b.unitOf(r.CgroupId)
		if !partial[u] || failed[r] || len(sockets[u]) >= rememberedSockets {
			continue
		}
		if held[u] == nil {
			held[u] = map[uint64]bool{}
		}
		if !held[u][r.File] {
			held[u][r.File] = true
			sockets[u] = append(sockets[u], r)
		}
	}
	b.sockets = sockets
}

// enterForeign takes a handle on each namespace of a socket some process holds that no
// process is in: the socket is taken from its holder (pidfd_getfd) and asked for its
// namespace (SIOCGSKNS), which must be the one the kernel named (the holder or its fd
// may be gone and their numbers reused); each cgroup's holder of a namespace is tried
// until one answers. The cgroups of the holders of a namespace none could be taken
// through are returned, a lower bound: one process's failing socket is its own CG's
// problem, not every CG's on the node. remembered (sockets earlier scans met) are tried
// after foreign: one that enters a namespace clears its failed holders, and one that
// fails is nobody's lower bound (its holder closed it, or is gone). Every record that
// failed is returned too.
func enterForeign(known *namespaces, foreign, remembered []bpf.Record) (*namespaces, []uint64, map[bpf.Record]bool) {
	out := &namespaces{inos: map[uint64]bool{}}
	failed := map[uint64][]uint64{} // namespace: the cgroups of holders that failed
	tried := map[bpf.Record]bool{}  // the records that failed
	for i, r := range slices.Concat(foreign, remembered) {
		if known.inos[r.File] || out.inos[r.File] {
			continue
		}
		fd, err := socketNamespace(int(r.Pid), int(r.Fd), r.File)
		if err != nil {
			tried[r] = true
			if i < len(foreign) {
				failed[r.File] = append(failed[r.File], r.CgroupId)
			}
			continue
		}
		out.inos[r.File] = true
		out.fds = append(out.fds, fd)
		out.paths = append(out.paths, "/proc/self/fd/"+strconv.Itoa(fd))
	}
	var unreadable []uint64
	for ino, cgroups := range failed {
		if !out.inos[ino] {
			unreadable = append(unreadable, cgroups...)
		}
	}
	return out, unreadable, tried
}

// socketNamespace opens the network namespace of process pid's socket fd, which must be
// the namespace of inode ino.
func socketNamespace(pid, fd int, ino uint64) (int, error) {
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return -1, fmt.Errorf("process %d: %w", pid, err)
	}
	defer unix.Close(pidfd)
	sock, err := unix.PidfdGetfd(pidfd, fd, 0)
	if err != nil {
		return -1, fmt.Errorf("socket %d of process %d: %w", fd, pid, err)
	}
	defer unix.Close(sock)
	ns, err := unix.IoctlRetInt(sock, unix.SIOCGSKNS)
	if err != nil {
		return -1, fmt.Errorf("network namespace of socket %d of process %d: %w", fd, pid, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(ns, &st); err != nil {
		_ = unix.Close(ns)
		return -1, fmt.Errorf("network namespace of socket %d of process %d: %w", fd, pid, err)
	}
	if st.Ino != ino {
		_ = unix.Close(ns)
		return -1, fmt.Errorf("socket %d of process %d: of network namespace %d, not %d (the fd or the process was reused)", fd, pid, st.Ino, ino)
	}
	return ns, nil
}

// monotonic is the time on CLOCK_MONOTONIC, the clock the kernel stamps opens with.
func monotonic() uint64 {
	// It cannot fail for this clock, which counts from boot: never negative.
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano()) //nolint:gosec // never negative
}
