// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/neureality-sdk/nr1-agent/internal/untrusted"
)

// GateCount is a pod's budget as the gate holds it.
type GateCount struct {
	Booked, Held                      int64
	Granted, Refused, Released, Moves uint64
}

// GateOptions shape a budget gate.
type GateOptions struct {
	// PinDir, in bpffs, holds the gate's maps and links, so that it keeps working while
	// the agent is away and a restarted agent takes it over.
	PinDir string
	// Devices are the character devices an open of which is counted: the NR1's queues.
	Devices []Device
	// RefuseUnknown refuses an open by a process under the gate whose pod has no budget;
	// otherwise it is let through, uncounted.
	RefuseUnknown bool
	// ByEntries links a grant to its open by the opens' entry tracepoints even where the
	// thread's registers would: the way of a kernel whose registers the self-test does
	// not read right, which costs every open of the node their dispatch.
	ByEntries bool
	// Compat is how 32-bit opens are followed: chosen by the kernel when empty.
	Compat CompatWay
}

// CompatWay is how the gate follows 32-bit opens, which the syscall tracepoints skip.
type CompatWay string

// The ways.
const (
	// CompatByKernel follows them by CompatByExit where the kernel has their entries
	// and no kprobes, by CompatByProbes elsewhere.
	CompatByKernel CompatWay = ""
	// CompatByProbes follows them by kprobes of the kernel's 32-bit entries, which
	// native syscalls never reach: nothing where the kernel has no kprobes.
	CompatByProbes CompatWay = "probes"
	// CompatByExit follows them by the thread's registers and the raw syscall exit
	// tracepoint, which every syscall of the node reaches: each pays one test.
	CompatByExit CompatWay = "exit"
)

// Gate is the budget gate (gate.bpf.c): an open of a gated device by a process of a
// pod that holds as many as it booked fails with EDQUOT. A pod is known to the gate by
// its cgroup's id in the v2 tree, and its budget lives in a slot of a map whose memory
// the agent shares with the programs, so that both move a count with atomic operations.
type Gate struct {
	objs   gateObjects
	pinDir string
	// ByRegisters says how a grant is linked to its open: by the thread's registers
	// (true), or by the opens' entry tracepoints, which cost every open of the node;
	// NotByRegisters says why not.
	ByRegisters    bool
	NotByRegisters string
	// CompatByExit says that 32-bit opens are linked by the raw syscall exit tracepoint
	// (no kprobes here, or told to), not by probes of their entries; CompatUnfollowed
	// says why neither links them, "" when one does: their grants then stay counted
	// until a settle.
	CompatByExit     bool
	CompatUnfollowed string
	mem              []byte // the budgets
	debts            []byte // what each budget is owed

	charged map[uint64]int64 // by pod, the descriptions charged at the last Reclaim

	mu    sync.Mutex
	slots map[uint64]uint32 // a pod's cgroup id → its budget's slot
	uids  map[string]uint32 // a pod booked by its UID → its budget's slot
	free  []uint32          // reused oldest first: a program that found a slot just
	// before its pod was forgotten is long done when the slot serves another
}

const gateLinks = "links"

// linkByRegisters sets spec's syscall numbers for this architecture, and has it link a
// grant to its open by the thread's registers, if wanted and its self-test reads them
// right here:
// run through bpf(2), it must read bpf's own number, under way. Else (an architecture or
// kernel whose registers it reads wrong, or that cannot run it) the opens' entry
// tracepoints link, and why not is returned.
func linkByRegisters(spec *ebpf.CollectionSpec, wanted bool) (bool, string, error) {
	for name, nr := range openSyscalls {
		if err := spec.Variables["nr_"+name].Set(nr); err != nil {
			return false, "", fmt.Errorf("the number of %s: %w", name, err)
		}
	}
	var why string
	switch {
	case !wanted:
		why = "told to link by entries"
	case len(openSyscalls) == 0:
		why = "no open syscalls known for " + runtime.GOARCH
	default:
		why = selfTestRegisters(spec)
	}
	if err := spec.Variables["link_by_registers"].Set(why == ""); err != nil {
		return false, "", fmt.Errorf("linking by registers: %w", err)
	}
	return why == "", why, nil
}

// selfTestRegisters runs the registers' self-test, and says what failed, "" for none.
func selfTestRegisters(spec *ebpf.CollectionSpec) string {
	probe, err := ebpf.NewProgram(spec.Programs["nr1_gate_registers"])
	if err != nil {
		return fmt.Sprintf("the registers' self-test does not load: %v", err)
	}
	defer probe.Close()
	nr, err := probe.Run(&ebpf.RunOptions{})
	if err != nil {
		return fmt.Sprintf("the registers' self-test does not run: %v", err)
	}
	if int64(nr) != unix.SYS_BPF { // the program's int, unsigned: -1 never matches
		return fmt.Sprintf("the registers' self-test read syscall %d within bpf(2) (%d)", int32(nr), unix.SYS_BPF) //nolint:gosec // a syscall number or -1
	}
	return ""
}

// LoadGate loads the gate's programs, takes over the maps and links an earlier agent
// pinned in opts.PinDir, and attaches the tracepoints that keep the counts. The device
// program is attached by Attach.
func LoadGate(opts GateOptions) (*Gate, error) {
	if err := haveSyscall(); err != nil {
		return nil, fmt.Errorf("loading the budget gate: %w", err)
	}
	if err := inBPFFS(opts.PinDir); err != nil {
		return nil, fmt.Errorf("budget gate pins: %w", err)
	}
	maps := filepath.Join(opts.PinDir, "maps")
	for _, d := range []string{maps, filepath.Join(opts.PinDir, gateLinks)} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("budget gate pins: %w", err)
		}
	}
	spec, err := loadGate()
	if err != nil {
		return nil, fmt.Errorf("loading the budget gate: %w", err)
	}
	byRegisters, notByRegisters, err := linkByRegisters(spec, !opts.ByEntries)
	if err != nil {
		return nil, fmt.Errorf("loading the budget gate: %w", err)
	}
	compatByExit, compatUnfollowed, err := followCompatByExit(spec, byRegisters, opts.Compat)
	if err != nil {
		return nil, fmt.Errorf("loading the budget gate: %w", err)
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{Maps: ebpf.MapOptions{PinPath: maps}})
	if err != nil {
		return nil, fmt.Errorf("loading the budget gate (maps pinned in %s): %w", maps, err)
	}
	// Each program in a tracepoint section is attached to the tracepoint it names; the
	// opens' entries only where registers do not link.
	tracepoints, probes := map[string]*ebpf.Program{}, []compatProbe{}
	var compatExit *ebpf.Program
	for name, p := range spec.Programs {
		if strings.HasPrefix(p.SectionName, "kprobe/") || strings.HasPrefix(p.SectionName, "kretprobe/") {
			if !compatByExit {
				probes = append(probes, compatProbe{p.SectionName, coll.Programs[name]})
			}
			continue
		}
		if p.SectionName == "raw_tp/sys_exit" {
			if compatByExit {
				compatExit = coll.Programs[name]
			}
			continue
		}
		tp, ok := strings.CutPrefix(p.SectionName, "tracepoint/")
		if !ok {
			continue
		}
		if syscall, entry := strings.CutPrefix(tp, "syscalls/sys_enter_"); entry && byRegisters {
			if _, open := openSyscalls[syscall]; open {
				continue
			}
		}
		tracepoints[tp] = coll.Programs[name]
	}
	g := &Gate{pinDir: opts.PinDir, ByRegisters: byRegisters, NotByRegisters: notByRegisters, CompatByExit: compatByExit, CompatUnfollowed: compatUnfollowed, slots: map[uint64]uint32{}, uids: map[string]uint32{}}
	if err := coll.Assign(&g.objs); err != nil {
		coll.Close()
		return nil, fmt.Errorf("loading the budget gate: %w", err)
	}
	coll.Close() // what was not assigned
	if err := g.open(opts, tracepoints, probes, compatExit); err != nil {
		_ = g.Close()
		return nil, err
	}
	// The maps of an earlier version this one does not use, once its links are gone.
	pinned, err := os.ReadDir(maps)
	if err != nil {
		_ = g.Close()
		return nil, fmt.Errorf("budget gate pins: %w", err)
	}
	for _, e := range pinned {
		if spec.Maps[e.Name()] == nil {
			if err := os.Remove(filepath.Join(maps, e.Name())); err != nil {
				_ = g.Close()
				return nil, fmt.Errorf("budget gate pins: %w", err)
			}
		}
	}
	return g, nil
}

func (g *Gate) open(opts GateOptions, tracepoints map[string]*ebpf.Program, probes []compatProbe, compatExit *ebpf.Program) error {
	for _, d := range opts.Devices {
		if err := g.objs.Gated.Put(gateGateDev(d), uint8(1)); err != nil {
			return fmt.Errorf("gating device %d:%d: %w", d.Major, d.Minor, err)
		}
	}
	var refuse uint64
	if opts.RefuseUnknown {
		refuse = 1
	}
	if err := g.objs.Node.Put(uint32(gateSettingRefuseUnknown), refuse); err != nil {
		return fmt.Errorf("budget gate policy: %w", err)
	}
	mem, err := mmapArray(g.objs.Budgets, unsafe.Sizeof(gateBudget{}))
	if err != nil {
		return fmt.Errorf("mapping the budget gate's budgets: %w", err)
	}
	g.mem = mem
	if g.debts, err = mmapArray(g.objs.Owed, unsafe.Sizeof(int64(0))); err != nil {
		return fmt.Errorf("mapping what the budget gate's budgets are owed: %w", err)
	}
	used := map[uint32]bool{}
	var id uint64
	var slot uint32
	for it := g.objs.Pods.Iterate(); it.Next(&id, &slot); {
		g.slots[id] = slot
		used[slot] = true
	}
	var uid gatePodUid
	for it := g.objs.Uids.Iterate(); it.Next(&uid, &slot); {
		g.uids[uidString(uid)] = slot
		used[slot] = true
	}
	for s := range g.objs.Budgets.MaxEntries() {
		if !used[s] {
			g.free = append(g.free, s)
		}
	}
	ours := map[string]bool{gateDeviceLink: true}
	for tp, prog := range tracepoints {
		if err := g.attachTracepoint(tp, prog); err != nil {
			return err
		}
		ours[tracepointLink(tp)] = true
	}
	if compatExit != nil {
		l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: "sys_exit", Program: compatExit})
		if err != nil {
			return fmt.Errorf("budget gate: attaching to the raw tracepoint sys_exit: %w", err)
		}
		if err := g.pinLink(compatExitLink, l); err != nil {
			return err
		}
		ours[compatExitLink] = true
	}
	for _, p := range probes {
		kind, _, _ := strings.Cut(p.section, "/") // a kprobe and a kretprobe may share an entry
		err := attachCompat(p, func(entry string, l link.Link) error {
			ours[kind+"-"+entry] = true
			return g.pinLink(kind+"-"+entry, l)
		})
		if err != nil {
			return fmt.Errorf("budget gate: %w", err)
		}
	}
	return g.unpinStale(ours)
}

// unpinStale detaches the links an earlier version of the gate pinned that this one does
// not make (its close and exit tracepoints): they would move the counts beside this
// version's programs.
func (g *Gate) unpinStale(ours map[string]bool) error {
	dir := filepath.Join(g.pinDir, gateLinks)
	pinned, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("budget gate pins: %w", err)
	}
	for _, e := range pinned {
		if ours[e.Name()] {
			continue
		}
		if err := unpinLink(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// unpinLink detaches the link pinned at p.
func unpinLink(p string) error {
	l, err := link.LoadPinnedLink(p, nil)
	if err != nil {
		return fmt.Errorf("budget gate: the link pinned as %s: %w", p, err)
	}
	if err := l.Unpin(); err != nil {
		_ = l.Close()
		return fmt.Errorf("budget gate: unpinning %s: %w", p, err)
	}
	if err := l.Close(); err != nil {
		return fmt.Errorf("budget gate: detaching %s: %w", p, err)
	}
	return nil
}

// tracepointLink is the name a tracepoint's link is pinned under.
func tracepointLink(tp string) string {
	group, name := filepath.Split(tp)
	return filepath.Base(group) + "-" + name
}

// compatExitLink is the name the raw syscall exit tracepoint's link is pinned under.
const compatExitLink = "raw_tp-sys_exit"

// followCompatByExit sets spec's 32-bit syscall numbers, and has it follow 32-bit opens
// by the raw syscall exit tracepoint where told to, or, by the kernel, where their
// entries are there and no kprobe can follow them (CompatUnseen): else the grants of a
// 32-bit CG's opens would stay counted until a settle, and its workers that come and go
// would be refused. It reads the registers as native linking does: only where they link.
// unfollowed says why neither way follows them here, "" when one does.
func followCompatByExit(spec *ebpf.CollectionSpec, byRegisters bool, way CompatWay) (follow bool, unfollowed string, err error) {
	for _, name := range []string{"open", "creat", "openat", "openat2", "open_by_handle_at", "ptrace",
		"access", "faccessat", "faccessat2", "inotify_add_watch", "fanotify_mark"} {
		nr, ok := compatSyscalls[name]
		if !ok {
			nr = noSyscall
		}
		if err := spec.Variables["compat_nr_"+name].Set(nr); err != nil {
			return false, "", fmt.Errorf("the number of 32-bit %s: %w", name, err)
		}
	}
	unseen := CompatUnseen()
	switch way {
	case CompatByExit:
		follow = true
	case CompatByKernel:
		follow = unseen != nil
	case CompatByProbes:
		if unseen != nil {
			unfollowed = unseen.Error()
		}
	default:
		return false, "", fmt.Errorf("32-bit opens followed by %q: want %q, %q or none", way, CompatByProbes, CompatByExit)
	}
	switch {
	case follow && len(compatSyscalls) == 0:
		follow = false // no 32-bit sibling known: nothing to follow
	case follow && !byRegisters:
		follow, unfollowed = false, "32-bit opens are followed at their exit by the thread's registers, which are not read here"
	}
	if err := spec.Variables["compat_by_exit"].Set(follow); err != nil {
		return false, "", fmt.Errorf("following 32-bit opens by their exit: %w", err)
	}
	return follow, unfollowed, nil
}

// noSyscall is the programs' NO_SYSCALL: no syscall has that number.
const noSyscall int64 = -2

// gateDeviceLink is the name the device program's link is pinned under.
const gateDeviceLink = "device"

// mmapArray maps the memory of m, an array of values of size elem.
func mmapArray(m *ebpf.Map, elem uintptr) ([]byte, error) {
	size := int(m.MaxEntries()) * int(elem)
	size = (size + os.Getpagesize() - 1) &^ (os.Getpagesize() - 1)
	mem, err := unix.Mmap(m.FD(), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map %s: %w", m, err)
	}
	return mem, nil
}

// gateSettingRefuseUnknown is the node map's slot of the unknown-pod policy.
const (
	gateSettingRefuseUnknown = 0
	gateUnknownAllowed       = 1
	gateUnknownRefused       = 2
	gateSettingLevel         = 3 // the level of the cgroup the gate is attached to
)

// attachTracepoint attaches prog and pins its link, replacing the link an earlier agent
// pinned there only once the new one is attached: no event falls between the two. A
// tracepoint this architecture lacks (open and creat on arm64) is skipped.
func (g *Gate) attachTracepoint(tp string, prog *ebpf.Program) error {
	group, name := filepath.Split(tp)
	l, err := link.Tracepoint(filepath.Clean(group), name, prog, nil)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("budget gate: attaching to tracepoint %s: %w", tp, err)
	}
	return g.pinLink(tracepointLink(tp), l)
}

// pinLink pins l under name, in place of what was pinned there.
func (g *Gate) pinLink(name string, l link.Link) error {
	defer l.Close()
	p := filepath.Join(g.pinDir, gateLinks, name)
	old, err := link.LoadPinnedLink(p, nil)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("budget gate: the link pinned as %s: %w", p, err)
	default:
		defer old.Close()
		if err := old.Unpin(); err != nil {
			return fmt.Errorf("budget gate: unpinning %s: %w", p, err)
		}
	}
	if err := l.Pin(p); err != nil {
		return fmt.Errorf("budget gate: pinning %s: %w", p, err)
	}
	return nil
}

// Attach attaches the device program to cgroupDir, the v2 cgroup above every pod (the
// kubelet's kubepods), in place of the one an earlier agent attached.
func (g *Gate) Attach(cgroupDir string) error {
	cg, err := os.Open(cgroupDir)
	if err != nil {
		return fmt.Errorf("budget gate: %w", err)
	}
	defer cg.Close()
	if err := g.objs.Root.Put(uint32(0), uint32(cg.Fd())); err != nil { //nolint:gosec // an fd
		return fmt.Errorf("budget gate: the tracepoints' cgroup %s: %w", cgroupDir, err)
	}
	level, err := cgroupLevel(cgroupDir)
	if err != nil {
		return fmt.Errorf("budget gate: %w", err)
	}
	if err := g.objs.Node.Put(uint32(gateSettingLevel), uint64(level)); err != nil { //nolint:gosec // a depth, never negative
		return fmt.Errorf("budget gate: the level of %s: %w", cgroupDir, err)
	}
	l, err := link.AttachCgroup(link.CgroupOptions{Path: cgroupDir, Attach: ebpf.AttachCGroupDevice, Program: g.objs.Nr1Gate})
	if err != nil {
		return fmt.Errorf("budget gate: attaching to %s: %w", cgroupDir, err)
	}
	return g.pinLink(gateDeviceLink, l)
}

// cgroupLevel is how deep dir is in its v2 tree: 0 at the mount's root. The root is the
// first directory up whose parent is another file system.
func cgroupLevel(dir string) (int, error) {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return 0, fmt.Errorf("the level of cgroup %s: %w", dir, err)
	}
	level := 0
	for d := filepath.Clean(dir); d != "/"; d = filepath.Dir(d) {
		var up unix.Stat_t
		if err := unix.Stat(filepath.Dir(d), &up); err != nil {
			return 0, fmt.Errorf("the level of cgroup %s: %w", dir, err)
		}
		if up.Dev != st.Dev {
			return level, nil
		}
		level++
	}
	return 0, fmt.Errorf("cgroup %s is not below a cgroup file system's mount", dir)
}

// budget is the slot's budget, in the memory the programs share.
func (g *Gate) budget(slot uint32) *gateBudget {
	// The array's values are laid out one after another, each 8-byte aligned, and the
	// slot is below the map's size: the pointer stays inside the mapping.
	return (*gateBudget)(unsafe.Pointer(&g.mem[uintptr(slot)*unsafe.Sizeof(gateBudget{})])) //nolint:gosec // see above
}

// debt is what the slot's budget is owed, in the memory the programs share.
func (g *Gate) debt(slot uint32) *int64 {
	return (*int64)(unsafe.Pointer(&g.debts[uintptr(slot)*unsafe.Sizeof(int64(0))])) //nolint:gosec // as budget
}

// Book sets the booking of the pod with uid whose v2 cgroup has the id pod. A pod new
// to the gate starts holding nothing, unless it was booked by its UID (BookUID): its
// cgroup then takes that budget, with what it has held since.
func (g *Gate) Book(pod uint64, uid string, booked int64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if slot, ok := g.slots[pod]; ok {
		atomic.StoreInt64(&g.budget(slot).Booked, booked)
		return nil
	}
	var slot uint32
	// Bound by the program as the cgroup was made, or booked by UID after that.
	err := g.objs.Pods.Lookup(pod, &slot)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		var ok bool
		if slot, ok = g.uids[uid]; ok {
			err = g.objs.Pods.Put(pod, slot)
		}
	}
	switch {
	case err == nil:
		g.slots[pod] = slot
		atomic.StoreInt64(&g.budget(slot).Booked, booked)
		return nil
	case !errors.Is(err, ebpf.ErrKeyNotExist):
		return fmt.Errorf("budget gate: booking cgroup %d: %w", pod, err)
	}
	slot, err = g.take(booked, func(slot uint32) error { return g.objs.Pods.Put(pod, slot) })
	if err != nil {
		return fmt.Errorf("budget gate: booking cgroup %d: %w", pod, err)
	}
	g.slots[pod] = slot
	return nil
}

// BookUID books the pod with uid before its cgroup is made: the gate binds the
// cgroup to the booking as it is made, so that the budget is in place before any of
// the pod's processes runs. A cgroup made earlier is bound by Book.
func (g *Gate) BookUID(uid string, booked int64) error {
	key, err := gateUID(uid)
	if err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if slot, ok := g.uids[uid]; ok {
		atomic.StoreInt64(&g.budget(slot).Booked, booked)
		return nil
	}
	slot, err := g.take(booked, func(slot uint32) error { return g.objs.Uids.Put(key, slot) })
	if err != nil {
		return fmt.Errorf("budget gate: booking pod %s: %w", uid, err)
	}
	g.uids[uid] = slot
	return nil
}

// take resets a free slot to booked, holding nothing, and has bind name it in a map
// the programs read; the slot stays free when bind fails.
func (g *Gate) take(booked int64, bind func(slot uint32) error) (uint32, error) {
	if len(g.free) == 0 {
		return 0, fmt.Errorf("no room (%d pods)", len(g.slots)+len(g.uids))
	}
	slot := g.free[0]
	b := g.budget(slot)
	atomic.StoreInt64(&b.Held, 0)
	for _, c := range []*uint64{&b.Granted, &b.Refused, &b.Released, &b.Moves} {
		atomic.StoreUint64(c, 0)
	}
	atomic.StoreInt64(&b.Booked, booked)
	atomic.StoreInt64(g.debt(slot), 0)
	if err := bind(slot); err != nil {
		return 0, err
	}
	g.free = g.free[1:]
	return slot, nil
}

// Forget removes the pod's budget, its UID's booking with it: its processes are then
// unknown to the gate.
func (g *Gate) Forget(pod uint64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	slot, ok := g.slots[pod]
	if !ok {
		return nil
	}
	if err := g.objs.Pods.Delete(pod); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("budget gate: forgetting cgroup %d: %w", pod, err)
	}
	if err := g.objs.Tracers.Delete(pod); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("budget gate: forgetting cgroup %d: %w", pod, err)
	}
	delete(g.slots, pod)
	for uid, s := range g.uids {
		if s == slot {
			if err := g.forgetUID(uid); err != nil {
				return err
			}
		}
	}
	g.free = append(g.free, slot)
	return nil
}

// ForgetUID removes the booking of a pod by its UID, and of the cgroup it was bound to.
func (g *Gate) ForgetUID(uid string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	slot, ok := g.uids[uid]
	if !ok {
		return nil
	}
	if err := g.forgetUID(uid); err != nil {
		return err
	}
	var id uint64
	var s uint32
	var bound []uint64
	for it := g.objs.Pods.Iterate(); it.Next(&id, &s); {
		if s == slot {
			bound = append(bound, id)
		}
	}
	for _, id := range bound {
		if err := g.objs.Pods.Delete(id); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("budget gate: forgetting pod %s (cgroup %d): %w", uid, id, err)
		}
		delete(g.slots, id)
	}
	g.free = append(g.free, slot)
	return nil
}

func (g *Gate) forgetUID(uid string) error {
	key, err := gateUID(uid)
	if err != nil {
		return err
	}
	if err := g.objs.Uids.Delete(key); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("budget gate: forgetting pod %s: %w", uid, err)
	}
	delete(g.uids, uid)
	return nil
}

// UIDs are the pods booked by their UID, an earlier agent's included.
func (g *Gate) UIDs() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]string, 0, len(g.uids))
	for uid := range g.uids {
		out = append(out, uid)
	}
	return out
}

// UIDOf names the pod UID the pod's cgroup's booking is bound to (the gate bound the
// cgroup to a booking by UID as it was made), false when it is bound to none.
func (g *Gate) UIDOf(pod uint64) (string, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	slot, ok := g.slots[pod]
	if !ok {
		return "", false
	}
	for uid, s := range g.uids {
		if s == slot {
			return uid, true
		}
	}
	return "", false
}

// gateUID is uid as the gate's map keys it: the 36 characters of a pod's UID.
func gateUID(uid string) (gatePodUid, error) {
	var key gatePodUid
	if len(uid) != len(key.Uid) || untrusted.PodUID(uid) != nil {
		return key, fmt.Errorf("budget gate: %s is not a pod UID", untrusted.Quote(uid))
	}
	for i := range key.Uid {
		key.Uid[i] = int8(uid[i]) //nolint:gosec // a UID is ASCII
	}
	return key, nil
}

func uidString(key gatePodUid) string {
	b := make([]byte, len(key.Uid))
	for i, c := range key.Uid {
		b[i] = byte(c) //nolint:gosec // the kernel's char, read back
	}
	return string(b)
}

// Pods are the cgroup ids of the pods the gate has a budget for, an earlier agent's
// included.
func (g *Gate) Pods() []uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]uint64, 0, len(g.slots))
	for id := range g.slots {
		out = append(out, id)
	}
	return out
}

// Count is the pod's budget as the gate holds it, false when the pod has none.
func (g *Gate) Count(pod uint64) (GateCount, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	slot, ok := g.slots[pod]
	if !ok {
		return GateCount{}, false
	}
	b := g.budget(slot)
	return GateCount{
		Booked: atomic.LoadInt64(&b.Booked), Held: atomic.LoadInt64(&b.Held),
		Granted: atomic.LoadUint64(&b.Granted), Refused: atomic.LoadUint64(&b.Refused),
		Released: atomic.LoadUint64(&b.Released), Moves: atomic.LoadUint64(&b.Moves),
	}, true
}

// Settle sets the pod's count to what was measured, if it has not moved since Count
// returned moves: the measurement then saw every open and release the count did.
// It says whether it did.
func (g *Gate) Settle(pod uint64, moves uint64, measured int64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	slot, ok := g.slots[pod]
	if !ok {
		return false
	}
	b := g.budget(slot)
	held := atomic.LoadInt64(&b.Held)
	if atomic.LoadUint64(&b.Moves) != moves {
		return false
	}
	// An open and its release between the two loads leave held as it was, and what was
	// measured as true as before.
	if !atomic.CompareAndSwapInt64(&b.Held, held, measured) {
		return false
	}
	// The descriptions the pod opened and no longer holds (another pod holds them) are
	// not in the measurement: their releases are owed to no count.
	atomic.StoreInt64(g.debt(slot), max(0, g.charged[pod]-measured))
	return true
}

// Reclaim gives back the charges of descriptions gone since they were counted. The
// kernel does so itself only when an open would go past a booking; a count read to be
// settled must be reclaimed first, or the measurement would lower it once and the
// next reclaim again.
func (g *Gate) Reclaim() error {
	if _, err := g.objs.Nr1GateReclaim.Run(&ebpf.RunOptions{}); err != nil {
		return fmt.Errorf("budget gate: reclaiming gone descriptions: %w", err)
	}
	charged := map[uint64]int64{}
	var key uint64
	var c gateCharge
	it := g.objs.Charges.Iterate()
	for it.Next(&key, &c) {
		charged[c.Pod]++
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("budget gate: reading the charged descriptions: %w", err)
	}
	g.mu.Lock()
	g.charged = charged
	g.mu.Unlock()
	return nil
}

// Unknown counts the opens by processes under the gate whose pod has no budget.
func (g *Gate) Unknown() (allowed, refused uint64, err error) {
	if err := g.objs.Node.Lookup(uint32(gateUnknownAllowed), &allowed); err != nil {
		return 0, 0, fmt.Errorf("budget gate: %w", err)
	}
	if err := g.objs.Node.Lookup(uint32(gateUnknownRefused), &refused); err != nil {
		return 0, 0, fmt.Errorf("budget gate: %w", err)
	}
	return allowed, refused, nil
}

// Close releases the agent's handles; the pinned gate keeps working.
func (g *Gate) Close() error {
	for _, m := range []*[]byte{&g.mem, &g.debts} {
		if *m != nil {
			_ = unix.Munmap(*m)
			*m = nil
		}
	}
	return g.objs.Close()
}

// RemoveGate lifts the gate pinned in pinDir (uninstall): its links are detached and
// every pin removed. It needs no program loaded; a gate that is not there is no error.
func RemoveGate(pinDir string) error {
	links, err := os.ReadDir(filepath.Join(pinDir, gateLinks))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("budget gate pins: %w", err)
	}
	for _, e := range links {
		if err := unpinLink(filepath.Join(pinDir, gateLinks, e.Name())); err != nil {
			return err
		}
	}
	if err := os.RemoveAll(pinDir); err != nil {
		return fmt.Errorf("budget gate pins: %w", err)
	}
	return nil
}
