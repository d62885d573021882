// SPDX-License-Identifier: Apache-2.0

// Package trust invents the cases of the generative trust suite (make trust): CGs of
// random shapes holding the NR1 in random ways, each either within its booking for its
// whole life or going over by a chosen amount at a chosen moment, and faults at random
// moments. The generator knows which: that is the oracle the suite judges the agent by
// (deploy/e2e/trust_test.go runs the cases on the local stack). The same seed gives the
// same cases, so that a run that fails can be replayed and kept.
package trust

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/neureality-sdk/nr1-agent/nr1"
)

// Mode is how the NR1 is offered: the device plugin or the DRA driver.
type Mode string

// The modes.
const (
	DevicePlugin Mode = "devicePlugin"
	DRA          Mode = "dra"
)

// Kind is what creates a CG's pod.
type Kind string

// The kinds of CG.
const (
	BarePod     Kind = "Pod"
	Job         Kind = "Job"
	StatefulSet Kind = "StatefulSet" // one replica, its pod deleted once and re-created under its name
	// SharedClaim is bare pods, name-0, name-1…, sharing one ResourceClaim (DRA): each
	// may use the whole claim, not each of them at once.
	SharedClaim Kind = "SharedClaim"
)

// Role is what a container is to its pod.
type Role string

// The roles.
const (
	Main    Role = "main"
	Init    Role = "init"    // a classic init container: holds, then exits
	Sidecar Role = "sidecar" // a native sidecar: an init container restarted always
)

// Holder is one container running nr1-load.
type Holder struct {
	Name string
	Role Role
	// Books says the container carries the CG's booking: its NR1 requests (device
	// plugin) or the claim (DRA). The others reach the DMA files through hostPath and
	// hold no queues (the queue device is the booking containers').
	Books bool
	// What it holds from its start: ranges of the DMA files from an offset, queues.
	ComputeMB, ComputeOffsetMB int64
	CPUMB, CPUOffsetMB         int64
	Queues                     int64
	// Fork starts workers holding the same ranges and descriptors (nothing more); Dup
	// opens one more queue and dup()s it so many times (one queue more, many fds);
	// InFlight queues are opened, sent over a unix socket nobody reads and closed: held
	// in flight by no fd. Ring queues are opened, registered with an io_uring and
	// closed: held by the ring.
	Fork, Dup, InFlight, Ring int
	// MoveAt is when, after it started, the runner moves the holder's first forked
	// worker into a child cgroup of the container's, as a container managing its own
	// cgroup can; zero for never.
	MoveAt time.Duration
	// MoveDeep moves it past PATH_MAX instead: into a chain of cgroups nested so deep
	// below the container's that no path reaches the worker's.
	MoveDeep bool
	// Exits after this long (an init container, or a sidecar the kubelet restarts each
	// time, RestartEvery); zero for one that holds until stopped.
	ExitAfter time.Duration
	// Pod is which of a SharedClaim case's pods it runs in.
	Pod int
	// Copies pads its in-flight and ring handles: each sent, or registered, that many
	// times, copies of one open file.
	Copies int
	// BigEnv gives it an environment too large for the runtime's status of it to be
	// read (from the suite's ConfigMaps): what it shows the runtime must not shield it.
	BigEnv bool
	// Probe tries to open one more queue every half second after its last step, closing
	// it at once, and logs each refusal: a throttle is judged by its effect, the opens
	// the kernel refuses.
	Probe bool
	// RingSlots makes an io_uring with so many empty slots, more than a scan reads of
	// one: the CG is uncertain by its own doing.
	RingSlots int
	// Flood holds so many fds on /dev/null in each of its processes (its Fork workers
	// too): a flood of ordinary descriptors, more than a scan walks of a heavy cgroup's
	// (footprint.HeavyWalk), the CG uncertain by its own doing.
	Flood int
	// Bind binds a unix datagram socket in the directory the framing cases share, and
	// never reads it; SendTo names the case ("namespace/name") whose socket this holder
	// sends its InFlight queues to instead of a socket of its own. What is in flight is
	// the sender's: the CG whose socket holds it is never acted on for it.
	Bind   bool
	SendTo string
	// Pool keeps so many short-lived workers going after its last step, each opening one
	// queue, holding it PoolHold and exiting with it open, another starting at once: an
	// honest worker pool at its booking, whose opens the budget gate must never refuse
	// (each refusal its log says is a false action).
	Pool int
	// Park opens so many queues, sends them into a socket pair of its own, hands the
	// pair's receiving end to its pod's keeper (Keep) and exits (an init container): its
	// queues outlive it, in flight in a socket a live container holds, sent by a cgroup
	// that is gone. They are the pod's as long as the keeper holds them.
	Park int
	// Keep binds a socket in ParkDir (a volume of its pod's) and keeps every fd sent
	// there, never reading it: what Park hands it.
	Keep bool
	// Compat runs nr1-load32, nr1-load built for the 32-bit sibling of the node's
	// architecture: its mappings, opens, sends and forks enter the kernel through the
	// compat entries, which no syscall tracepoint sees.
	Compat bool
	// Mark names the SharedClaim case, of another namespace, whose claim's CDI spec the
	// holder mounts through a hostPath where a share's mark goes: a mark the agent did not
	// write. It is reported (where the runtime does not tell CDI devices, CRI-O), never
	// counted, and the CG is judged as any other.
	Mark string
}

// RestartEvery is how long a restarting sidecar runs before it exits, to be started
// again after the kubelet's backoff: each start a container younger than its warm-up,
// which must never shield the CG going over beside it.
const RestartEvery = 1500 * time.Millisecond

// PoolHold is how long a pool's worker holds its queue.
const PoolHold = 150 * time.Millisecond

// probeEvery is how often a probing holder tries a new open.
const probeEvery = 500 * time.Millisecond

// OwnRingSlots is a table larger than a scan reads of one ring (16384 slots).
const OwnRingSlots = 1<<14 + 1

// A flood of a million fds: FloodFDs in each of FloodProcs processes (a container's fd
// limit is the runtime's, 20000 on the local stack), past what a scan walks of a flood
// (footprint.HeavyWalk).
const (
	FloodFDs   = 15000
	FloodProcs = 67
)

// Overrun is a CG going over: one of its holders raises what it holds of Resource to To
// at At after it started (of the docker partition: writes To MB into its writable layer,
// To set by the runner to the CG's booking of it).
type Overrun struct {
	Holder   int
	Resource nr1.Resource
	At       time.Duration
	To       int64
	// Degree says how far over the CG goes, for the run's table: the CG's holding after
	// it against the booking, or empty for the margin overrun gives.
	Degree string
}

// Case is one generated CG.
type Case struct {
	Name, Namespace string
	Mode            Mode
	Kind            Kind
	RestartPolicy   string // Never, OnFailure or Always (a pod's, or its template's)
	// Booked is what the CG books of the DMA memory and queues (MB, queues); the docker
	// partition is booked from the image's size when the pod is built.
	Booked  nr1.Amounts
	Holders []Holder
	Over    *Overrun // nil: within its booking for its whole life
	// Pods is how many pods share the claim of a SharedClaim case; 1 otherwise.
	Pods int
	// Decoy runs beside the holders a process named kubelet whose --config is endless:
	// no pod may decide what the agent reads of the node's kubelet.
	Decoy bool
	// SelfUncertain is a CG within its booking that makes what it holds unknown by its
	// own doing (an io_uring larger than a scan reads): warned and throttled, by the
	// default policy's selfUncertain ladder, and never killed.
	SelfUncertain bool
}

// Fault is a disruption of the node at a moment of the run.
type Fault struct {
	At   time.Duration
	What string // one of Faults
}

// Faults are the disruptions the suite injects; LaterFaults were added after seeds were
// kept, and are drawn from a stream of their own so that a kept seed still plays the
// plan it was kept for, with these on top.
var (
	Faults      = []string{"restart-kubelet", "restart-runtime", "delete-agent", "pause-kubelet"}
	LaterFaults = []string{"stop-apiserver", "roll-agent", "damage-checkpoint"}
)

// Plan is one mode's run: its cases and faults.
type Plan struct {
	Seed     uint64
	Mode     Mode
	Duration time.Duration
	Cases    []Case
	Faults   []Fault
	// Prevent runs the agent with its budget gate on: a CG going over on queues is
	// refused the open past its booking, and never acted on after the fact for it.
	Prevent bool
}

// Prevents says whether the run of seed in mode has the budget gate on: in one mode of
// each run, which by the seed's parity, so that every run judges the gate and the
// ladders alone, and two seeds in a row cover both modes with the gate.
func Prevents(seed uint64, mode Mode) bool { return (seed%2 == 0) == (mode == DevicePlugin) }

// Namespaces are the suite's namespaces: pods of the same name live in several.
var Namespaces = []string{"nr1-trust-a", "nr1-trust-b", "nr1-trust-c"}

// RecreateBy is when, at the latest, the runner deletes each StatefulSet's pod to have it
// re-created under its name.
const RecreateBy = 2 * time.Minute

// overMargin is how far over a CG goes at the least: clearly over, never a rounding.
const overMargin = 1.25

// Generate invents a plan of cases CGs and about faults faults for mode, from seed.
func Generate(seed uint64, mode Mode, duration time.Duration, cases, faults int) Plan {
	r := rand.New(rand.NewPCG(seed, uint64(len(mode)))) //nolint:gosec // replayable from its seed, not a secret
	// What was added after seeds were kept comes from streams of its own, one per wave of
	// additions.
	later := rand.New(rand.NewPCG(seed, 100+uint64(len(mode))))     //nolint:gosec // replayable from its seed, not a secret
	third := rand.New(rand.NewPCG(seed, 200+uint64(len(mode))))     //nolint:gosec // replayable from its seed, not a secret
	fourth := rand.New(rand.NewPCG(seed, 300+uint64(len(mode))))    //nolint:gosec // replayable from its seed, not a secret
	fifth := rand.New(rand.NewPCG(seed, 400+uint64(len(mode))))     //nolint:gosec // replayable from its seed, not a secret
	sixth := rand.New(rand.NewPCG(seed, 500+uint64(len(mode))))     //nolint:gosec // replayable from its seed, not a secret
	seventh := rand.New(rand.NewPCG(seed, 600+uint64(len(mode))))   //nolint:gosec // replayable from its seed, not a secret
	eighth := rand.New(rand.NewPCG(seed, 700+uint64(len(mode))))    //nolint:gosec // replayable from its seed, not a secret
	ninth := rand.New(rand.NewPCG(seed, 800+uint64(len(mode))))     //nolint:gosec // replayable from its seed, not a secret
	tenth := rand.New(rand.NewPCG(seed, 900+uint64(len(mode))))     //nolint:gosec // replayable from its seed, not a secret
	eleventh := rand.New(rand.NewPCG(seed, 1000+uint64(len(mode)))) //nolint:gosec // replayable from its seed, not a secret
	twelfth := rand.New(rand.NewPCG(seed, 1100+uint64(len(mode))))  //nolint:gosec // replayable from its seed, not a secret
	p := Plan{Seed: seed, Mode: mode, Duration: duration}
	for i := range cases {
		c := genCase(r, later, mode, duration, i)
		rings(third, &c)
		moves(third, &c, duration)
		hostile(fourth, &c)
		degree(fourth, &c)
		partition(fifth, &c)
		probes(&c)
		selfUncertain(fifth, &c)
		flood(eighth, &c)
		pool(ninth, &c)
		restarting(tenth, &c)
		parked(eleventh, &c)
		compat(twelfth, &c)
		p.Cases = append(p.Cases, c)
	}
	// Faults after the CGs started and before the last minute, when overruns must show.
	window := duration - 2*time.Minute
	for range faults {
		if window <= 0 {
			break
		}
		p.Faults = append(p.Faults, Fault{At: time.Minute/2 + time.Duration(r.Int64N(int64(window))), What: Faults[r.IntN(len(Faults))]})
	}
	// Faults, and in DRA mode pods sharing a claim, added later.
	for range min(faults, faults/2+1) {
		if window <= 0 {
			break
		}
		p.Faults = append(p.Faults, Fault{At: time.Minute/2 + time.Duration(later.Int64N(int64(window))), What: LaterFaults[later.IntN(len(LaterFaults))]})
	}
	sortFaults(p.Faults)
	if mode == DRA {
		for i := range max(cases/8, 1) {
			p.Cases = append(p.Cases, sharedCase(later, duration, i))
		}
		forgeMarks(sixth, &p)
	}
	frame(seventh, &p)
	return p
}

// FrameDir is where, in the containers of the framing cases, their sockets are.
const FrameDir = "/frame"

// socketOf is the path of the socket case ("namespace/name") binds.
func socketOf(c string) string { return FrameDir + "/" + strings.ReplaceAll(c, "/", ".") + ".sock" }

// frame adds two CGs, each a bare pod that never restarts and never goes over: one at
// its queue booking binds a socket it never reads; the other, in another namespace,
// sends queues it holds in flight to that socket. What is in flight is the sender's,
// within its booking; charged to the socket's CG, it would put that one over.
func frame(r *rand.Rand, p *Plan) {
	pair := func(name, ns string, queues int64) Case {
		c := Case{Name: name, Namespace: ns, Mode: p.Mode, Kind: BarePod, RestartPolicy: "Never", Pods: 1}
		c.Booked[nr1.ComputeDMAMemory] = nr1.Units(1 + r.IntN(4))
		c.Booked[nr1.HypervisorQueue] = nr1.Units(queues)
		c.Holders = []Holder{{Name: "health-handler", Role: Main, Books: true, ComputeMB: int64(c.Booked[nr1.ComputeDMAMemory])}}
		return c
	}
	victim := pair("frame-0", Namespaces[0], int64(1+r.IntN(4)))
	victim.Holders[0].Queues, victim.Holders[0].Bind = int64(victim.Booked[nr1.HypervisorQueue]), true
	sender := pair("frame-1", Namespaces[1], int64(2+r.IntN(4)))
	h := &sender.Holders[0]
	h.InFlight = 1 + r.IntN(min(3, int(sender.Booked[nr1.HypervisorQueue])-1))
	h.Queues = int64(sender.Booked[nr1.HypervisorQueue]) - int64(h.InFlight) - int64(r.IntN(2))
	h.SendTo = victim.Namespace + "/" + victim.Name
	p.Cases = append(p.Cases, victim, sender)
}

// forgeMarks gives, in DRA mode, some CGs of another namespace than the first shared
// claim's a holder, not booking, that mounts that claim's CDI spec where a share's mark
// goes. Only a bare pod's that never restarts, on a container that never exits: a
// container created again (a restart, a Job's or StatefulSet's next pod) could not start
// once the claim is unprepared and its spec gone.
func forgeMarks(r *rand.Rand, p *Plan) {
	i := slices.IndexFunc(p.Cases, func(c Case) bool { return c.Kind == SharedClaim })
	if i < 0 {
		return
	}
	target := p.Cases[i]
	for k := range p.Cases {
		c := &p.Cases[k]
		if c.Kind != BarePod || c.RestartPolicy != "Never" || c.Namespace == target.Namespace || r.IntN(2) != 0 {
			continue
		}
		var candidates []int
		for j, h := range c.Holders {
			if !h.Books && h.Role != Init && h.ExitAfter == 0 {
				candidates = append(candidates, j)
			}
		}
		if len(candidates) > 0 {
			c.Holders[candidates[r.IntN(len(candidates))]].Mark = target.Name
		}
	}
}

// Marks names the SharedClaim case whose claim a holder of the case forges a mark of, or
// "" for none.
func (c *Case) Marks() string {
	for _, h := range c.Holders {
		if h.Mark != "" {
			return h.Mark
		}
	}
	return ""
}

// sharedCase is two or three pods sharing one claim, each holding part of it through its
// health-handler: DMA ranges side by side, queues. One may go over alone, or all of
// them together while each stays within the claim.
func sharedCase(r *rand.Rand, duration time.Duration, i int) Case {
	c := Case{Name: fmt.Sprintf("shared-%d", i), Namespace: Namespaces[i%len(Namespaces)], Mode: DRA, Kind: SharedClaim,
		RestartPolicy: []string{"Never", "OnFailure", "Always"}[r.IntN(3)], Pods: 2 + r.IntN(2)}
	compute := int64(5 + r.IntN(8))
	c.Booked[nr1.ComputeDMAMemory] = nr1.Units(compute)
	c.Booked[nr1.HypervisorQueue] = nr1.Units(c.Pods + r.IntN(4))
	// The first pod maps [0, half), the others share [half, compute) from half on.
	half := (compute + 1) / 2
	queues := int64(c.Booked[nr1.HypervisorQueue])
	for p := range c.Pods {
		h := Holder{Name: "health-handler", Role: Main, Books: true, Pod: p, Queues: min(1, queues)}
		queues -= h.Queues
		if p == 0 {
			h.ComputeMB = half
		} else {
			h.ComputeOffsetMB, h.ComputeMB = half, r.Int64N(compute-half+1)
		}
		if r.IntN(3) == 0 {
			h.Fork = 1 + r.IntN(2)
		}
		c.Holders = append(c.Holders, h)
	}
	if r.IntN(2) == 0 {
		return c
	}
	latest := max(duration-2*time.Minute, 40*time.Second)
	o := &Overrun{Holder: 1 + r.IntN(c.Pods-1), Resource: nr1.ComputeDMAMemory, At: 20*time.Second + time.Duration(r.Int64N(int64(latest-20*time.Second)))}
	threshold := int64(float64(compute)*overMargin) + 1
	if r.IntN(2) == 0 {
		// Together: the pod's range grows past what the first leaves, within the claim.
		o.To = threshold - half
	} else {
		// Alone: the pod holds more than the whole claim.
		o.To = threshold
	}
	c.Over = o
	return c
}

func sortFaults(f []Fault) {
	for i := 1; i < len(f); i++ {
		for j := i; j > 0 && f[j].At < f[j-1].At; j-- {
			f[j], f[j-1] = f[j-1], f[j]
		}
	}
}

func genCase(r, later *rand.Rand, mode Mode, duration time.Duration, i int) Case {
	c := Case{Name: "cg-" + strconv.Itoa(i%4), Namespace: Namespaces[i/4%len(Namespaces)], Mode: mode, Pods: 1}
	c.Name = fmt.Sprintf("%s-%d", c.Name, i/4/len(Namespaces)) // unique per namespace, repeated across them
	switch n := r.IntN(10); {
	case n < 6:
		c.Kind = BarePod
	case n < 8:
		c.Kind = Job
	default:
		c.Kind = StatefulSet
	}
	switch c.Kind {
	case Job:
		c.RestartPolicy = []string{"Never", "OnFailure"}[r.IntN(2)]
	case StatefulSet:
		c.RestartPolicy = "Always"
	default:
		c.RestartPolicy = []string{"Never", "OnFailure", "Always"}[r.IntN(3)]
	}
	c.Booked[nr1.ComputeDMAMemory] = nr1.Units(1 + r.IntN(8))
	c.Booked[nr1.CPUDMAMemory] = nr1.Units(r.IntN(3))
	c.Booked[nr1.HypervisorQueue] = nr1.Units(1 + r.IntN(8))

	// The booking container, then 0–3 others.
	c.Holders = append(c.Holders, Holder{Name: "health-handler", Role: Main, Books: true})
	for k := range r.IntN(4) {
		h := Holder{Name: "c" + strconv.Itoa(k), Role: Main}
		switch r.IntN(6) {
		case 0:
			h.Role, h.ExitAfter = Init, time.Duration(5+r.IntN(20))*time.Second
		case 1:
			h.Role = Sidecar
		}
		// The device plugin's booking stays on health-handler: a kubelet restart fails a
		// pod whose init container was given device-plugin resources before the plugin is
		// back (kubernetes/kubernetes#124345). A DRA claim may be any container's.
		h.Books = mode == DRA && r.IntN(2) == 0
		c.Holders = append(c.Holders, h)
	}
	fill(r, &c)
	inFlight(later, &c)
	if r.IntN(3) == 0 {
		c.Over = overrun(r, &c, duration)
	}
	return c
}

// fill shares the booking out among the holders so that what the CG holds, counted
// as the agent counts it (a DMA range several processes or containers map once, a queue
// once however many fds name it), never exceeds it.
func fill(r *rand.Rand, c *Case) {
	compute, cpu := int64(c.Booked[nr1.ComputeDMAMemory]), int64(c.Booked[nr1.CPUDMAMemory])
	queues := int64(c.Booked[nr1.HypervisorQueue])
	for i := range c.Holders {
		h := &c.Holders[i]
		// Each holder maps a range within [0, booked) of each DMA file, from its own
		// offset: distinct or overlapping, their union within the booking.
		if compute > 0 {
			h.ComputeMB = r.Int64N(compute + 1)
			h.ComputeOffsetMB = r.Int64N(compute - h.ComputeMB + 1)
		}
		if cpu > 0 {
			h.CPUMB = r.Int64N(cpu + 1)
			h.CPUOffsetMB = r.Int64N(cpu - h.CPUMB + 1)
		}
		if h.Role != Init && r.IntN(3) == 0 {
			h.Fork = 1 + r.IntN(3)
		}
		// Queues: only booking containers, their sum within the booking.
		if h.Books && queues > 0 {
			h.Queues = r.Int64N(queues + 1)
			queues -= h.Queues
			if queues > 0 && r.IntN(3) == 0 {
				h.Dup, queues = 1+r.IntN(4), queues-1
			}
		}
	}
}

// inFlight gives a booking holder that holds until stopped some of the queues the others
// left, to hold in flight.
func inFlight(r *rand.Rand, c *Case) {
	left := int64(c.Booked[nr1.HypervisorQueue]) - c.Held(nr1.HypervisorQueue)
	for i := range c.Holders {
		h := &c.Holders[i]
		if left <= 0 || !h.Books || h.Role == Init || r.IntN(3) != 0 {
			continue
		}
		h.InFlight = 1 + r.IntN(int(min(left, 3)))
		left -= int64(h.InFlight)
	}
}

// rings gives a booking holder that holds until stopped some of the queues the others
// left, to hold registered with an io_uring.
func rings(r *rand.Rand, c *Case) {
	left := int64(c.Booked[nr1.HypervisorQueue]) - c.Held(nr1.HypervisorQueue)
	for i := range c.Holders {
		h := &c.Holders[i]
		if left <= 0 || !h.Books || h.Role == Init || r.IntN(3) != 0 {
			continue
		}
		h.Ring = 1 + r.IntN(int(min(left, 3)))
		left -= int64(h.Ring)
	}
}

// degree varies how an overrun goes over: on CPU DMA memory too, and by one unit only
// or several times over (past the hard ratio), besides the margin overrun gives. A
// shared claim's overrun keeps its own: it says whether its pod goes over alone.
func degree(r *rand.Rand, c *Case) {
	o := c.Over
	if o == nil || c.Kind == SharedClaim {
		return
	}
	h := c.Holders[o.Holder]
	if r.IntN(4) == 0 {
		o.Resource = nr1.CPUDMAMemory
	}
	booked := int64(c.Booked[o.Resource])
	var threshold int64
	switch r.IntN(3) {
	case 0:
		threshold = booked + 1 // one unit over
	case 1:
		threshold = max(booked*int64(2+r.IntN(3)), booked+1) // several times over
	default:
		threshold = int64(float64(booked)*overMargin) + 1
	}
	o.Degree = fmt.Sprintf("%d of %d", threshold, booked)
	switch o.Resource {
	case nr1.HypervisorQueue:
		o.To = max(threshold-(c.Queues()-h.Queues), h.Queues+1)
	default:
		o.To = threshold
	}
}

// partition makes some overruns the docker partition's: the holder writes into its
// writable layer as much again as the CG booked of the partition (the runner sets To
// once it knows the image's size), and the ladder evicts the pod.
func partition(r *rand.Rand, c *Case) {
	// Not a StatefulSet's: the runner deletes its pod while the eviction may be due.
	if o := c.Over; o != nil && c.Kind != SharedClaim && r.IntN(5) == 0 && c.Kind != StatefulSet {
		o.Resource, o.To, o.Degree = nr1.DockerPartition, 0, "its booking written again"
	}
}

// probes makes a holder going over on queues probe once over, where the ladder throttles
// before it kills: its opens must be refused before the kill. Not where the probe's
// open, one queue more for an instant, could take the CG to the hard ratio (killed at
// once, as it should be).
func probes(c *Case) {
	if o := c.Over; o != nil && o.Resource == nr1.HypervisorQueue && c.HeldAfter(o.Resource)+1 < 2*int64(c.Booked[o.Resource]) {
		c.Holders[o.Holder].Probe = true
	}
}

// Hard says whether the overrun takes the CG to the hard ratio (2) or past it, where the
// ladder kills at once. The docker partition's ratio is known only at run time.
func (c *Case) Hard() bool {
	o := c.Over
	return o != nil && o.Resource != nr1.DockerPartition && c.HeldAfter(o.Resource) >= 2*int64(c.Booked[o.Resource])
}

// selfUncertain makes some CGs that never go over uncertain by their own doing: their
// booking holder keeps an io_uring larger than a scan reads, and probes from its start.
// A probe's open is one queue more for an instant: only a CG holding fewer queues than
// it booked may probe without going over.
func selfUncertain(r *rand.Rand, c *Case) {
	if c.Over != nil || c.Kind == SharedClaim || c.Queues() >= int64(c.Booked[nr1.HypervisorQueue]) || r.IntN(4) != 0 {
		return
	}
	for i := range c.Holders {
		if h := &c.Holders[i]; h.Books && h.Role == Main {
			c.SelfUncertain, h.RingSlots, h.Probe = true, OwnRingSlots, true
			return
		}
	}
}

// flood makes half the CGs uncertain by their own doing do it with a flood of ordinary
// descriptors instead of a ring: a neighbour whose fd tables a scan does not walk whole,
// beside the CGs going over that must be judged on time.
func flood(r *rand.Rand, c *Case) {
	if !c.SelfUncertain || r.IntN(2) != 0 {
		return
	}
	for i := range c.Holders {
		if h := &c.Holders[i]; h.RingSlots > 0 {
			h.RingSlots, h.Flood, h.Fork = 0, FloodFDs, FloodProcs-1
		}
	}
}

// pool gives some CGs that never go over, and hold fewer queues than they booked, a
// worker pool taking the rest of their booking on their booking holder: workers that
// come and go at the booking, an honest workload's ordinary pattern and the budget
// gate's first test. Not beside a probe, whose open would be one past the booking.
func pool(r *rand.Rand, c *Case) {
	if c.Over != nil || c.Kind == SharedClaim || c.SelfUncertain || r.IntN(3) != 0 {
		return
	}
	spare := int64(c.Booked[nr1.HypervisorQueue]) - c.Held(nr1.HypervisorQueue)
	if spare < 1 {
		return
	}
	for i := range c.Holders {
		if h := &c.Holders[i]; h.Books && h.Role == Main && !h.Probe {
			h.Pool = int(min(spare, 4))
			return
		}
	}
}

// restarting makes a sidecar of some CGs going over exit RestartEvery after each start,
// for the kubelet to start again after its backoff: the hog beside it is judged as any.
// Only a sidecar holding nothing: what a container younger than its warm-up holds is
// not counted yet, so a restarting holder would take part of the overrun's margin away
// (and a mark is forged only on a container never created again).
func restarting(r *rand.Rand, c *Case) {
	if c.Over == nil || r.IntN(2) != 0 {
		return
	}
	for i := range c.Holders {
		h := &c.Holders[i]
		holds := h.ComputeMB+h.CPUMB+h.Queues > 0 || h.Dup+h.InFlight+h.Ring+h.Pool > 0 || h.Probe || h.Mark != ""
		if h.Role == Sidecar && i != c.Over.Holder && !holds {
			h.ExitAfter = RestartEvery
			return
		}
	}
	c.Holders = append(c.Holders, Holder{Name: "restarter", Role: Sidecar, ExitAfter: RestartEvery})
}

// compat makes some CGs' booking holder a 32-bit program: what it maps, opens and sends
// is counted, and refused past the booking, as a 64-bit one's is, whether it stays
// within or goes over. Not a holder of io_uring queues or slots, which nr1-load32 does
// not make.
func compat(r *rand.Rand, c *Case) {
	if c.Kind == SharedClaim || r.IntN(4) != 0 {
		return
	}
	if h := &c.Holders[0]; h.Books && h.Role == Main && h.Ring == 0 && h.RingSlots == 0 {
		h.Compat = true
	}
}

// ParkDir is where, in the containers of a case with a keeper, the keeper's socket is.
const ParkDir = "/park"

// parked gives, in DRA mode (where a classic init container may book), some CGs an init
// container parking some of the queues the others left with a keeper sidecar before it
// exits: what a container that is gone sent into a socket its pod still holds is the
// pod's, neither nobody's nor the node's. The keeper starts before the parker, as
// init containers start in order.
func parked(r *rand.Rand, c *Case) {
	probing := slices.ContainsFunc(c.Holders, func(h Holder) bool { return h.Probe })
	if c.Mode != DRA || c.Kind == SharedClaim || probing || r.IntN(3) != 0 {
		return // a probe's open is one queue past what is held: none may be parked too
	}
	left := int64(c.Booked[nr1.HypervisorQueue]) - c.Held(nr1.HypervisorQueue)
	if left < 1 {
		return
	}
	park := 1 + r.IntN(int(min(left, 3)))
	// An overrun on queues was sized without them: its holder takes as many fewer, so
	// that the CG goes over by the degree drawn.
	if o := c.Over; o != nil && o.Resource == nr1.HypervisorQueue {
		if o.To-int64(park) <= c.Holders[o.Holder].Queues {
			return
		}
		o.To -= int64(park)
	}
	c.Holders = append(c.Holders, Holder{Name: "keeper", Role: Sidecar, Keep: true},
		Holder{Name: "parker", Role: Init, Books: true, Park: park, ExitAfter: 2 * time.Second})
}

// hostile gives some cases what a tenant does to make itself unknown: in-flight and
// ring handles padded with copies of one file, a holder whose environment is too large
// for the runtime's status of it to be read, a process named kubelet whose --config is
// endless. None of it changes what the case holds: each is judged as any other.
func hostile(r *rand.Rand, c *Case) {
	for i := range c.Holders {
		if h := &c.Holders[i]; (h.InFlight > 0 || h.Ring > 0) && r.IntN(2) == 0 {
			h.Copies = 100 + r.IntN(500)
		}
	}
	if r.IntN(4) == 0 {
		// Not a booking holder: the device plugin's booking is cross-checked against the
		// status's annotations, and a classic init container's DRA shares are told by
		// its status alone; what any other holds is found below the pod's cgroup.
		var candidates []int
		for i, h := range c.Holders {
			if !h.Books && h.Role != Init {
				candidates = append(candidates, i)
			}
		}
		if len(candidates) > 0 {
			c.Holders[candidates[r.IntN(len(candidates))]].BigEnv = true
		}
	}
	c.Decoy = r.IntN(4) == 0
}

// moves picks, now and then, a forking holder whose worker the runner moves into a child
// cgroup while the CG runs, one level down or past PATH_MAX: what the CG holds is the
// same, from another cgroup.
func moves(r *rand.Rand, c *Case, duration time.Duration) {
	for i := range c.Holders {
		h := &c.Holders[i]
		if h.Fork == 0 || h.Role == Init || r.IntN(2) != 0 {
			continue
		}
		h.MoveAt = 10*time.Second + time.Duration(r.Int64N(int64(max(duration-3*time.Minute, time.Minute))))
		// From the time drawn, not a draw of its own: a seed plays the same cases as
		// before deep moves were generated (make trust-mutants' seed among them).
		h.MoveDeep = h.MoveAt/time.Second%2 == 0
	}
}

// overrun picks a holder that holds until stopped and how far over it goes.
func overrun(r *rand.Rand, c *Case, duration time.Duration) *Overrun {
	var candidates []int
	for i, h := range c.Holders {
		if h.Role != Init {
			candidates = append(candidates, i)
		}
	}
	o := &Overrun{Holder: candidates[r.IntN(len(candidates))]}
	h := c.Holders[o.Holder]
	resources := []nr1.Resource{nr1.ComputeDMAMemory}
	if h.Books {
		resources = append(resources, nr1.HypervisorQueue)
	}
	o.Resource = resources[r.IntN(len(resources))]
	// Over after the CG has been seen within, and with a minute left to be acted on; a
	// StatefulSet's pod is re-created within the run's first two minutes, and its
	// successor goes over as long after its own start.
	latest := duration - 2*time.Minute
	if c.Kind == StatefulSet {
		latest -= RecreateBy
	}
	if latest < 40*time.Second {
		latest = 40 * time.Second
	}
	o.At = 20*time.Second + time.Duration(r.Int64N(int64(latest-20*time.Second)))
	booked := int64(c.Booked[o.Resource])
	threshold := int64(float64(booked)*overMargin) + 1
	switch o.Resource {
	case nr1.HypervisorQueue:
		// Its own queues raised so that the CG's sum, without the init containers' (gone
		// by then), passes the booking by the margin.
		o.To = max(threshold-(c.Queues()-h.Queues), h.Queues+1)
	default:
		// One range of that length from its offset: the union is over whatever the others
		// map.
		o.To = threshold
	}
	return o
}

// OverAlone says whether a SharedClaim case's overrun takes its pod past the whole claim
// by itself: then it alone is to be acted on, and an action on a pod sharing the claim
// is a false one. Going over together (each within the claim, their union past it),
// every pod of the case may be.
func (c *Case) OverAlone() bool {
	if c.Kind != SharedClaim || c.Over == nil {
		return false
	}
	return c.Over.To > int64(c.Booked[c.Over.Resource])
}

// OverPod names the pod of the case the overrun happens in.
func (c *Case) OverPod() string {
	if c.Over == nil {
		return ""
	}
	if c.Kind == SharedClaim {
		return fmt.Sprintf("%s-%d", c.Name, c.Holders[c.Over.Holder].Pod)
	}
	return ""
}

// Queues is what the CG's holders that hold until stopped hold of queues before any
// overrun: each one's own, and one per dup'ed queue.
func (c *Case) Queues() int64 {
	var n int64
	for _, h := range c.Holders {
		if h.Role != Init {
			n += h.Queues + int64(min(h.Dup, 1)) + int64(h.InFlight) + int64(h.Ring) + int64(h.Pool)
		}
		n += int64(h.Park) // parked with a keeper, they outlive the parker
	}
	return n
}

// Held is what the CG holds of r before any overrun, counted as the agent counts it:
// the union of the DMA ranges, the sum of queues (an init container's included, the
// most it ever holds).
func (c *Case) Held(r nr1.Resource) int64 {
	if r == nr1.HypervisorQueue {
		var n int64
		for _, h := range c.Holders {
			n += h.Queues + int64(min(h.Dup, 1)) + int64(h.InFlight) + int64(h.Ring) + int64(h.Pool) + int64(h.Park)
		}
		return n
	}
	var ranges [][2]int64
	for _, h := range c.Holders {
		lo, size := h.ComputeOffsetMB, h.ComputeMB
		if r == nr1.CPUDMAMemory {
			lo, size = h.CPUOffsetMB, h.CPUMB
		}
		if size > 0 {
			ranges = append(ranges, [2]int64{lo, lo + size})
		}
	}
	return union(ranges)
}

// HeldAfter is what the CG holds of r once its overrun happened, its init containers
// gone (what they parked with a keeper kept).
func (c *Case) HeldAfter(r nr1.Resource) int64 {
	after := *c
	after.Holders = nil
	for i, h := range c.Holders {
		if h.Role == Init {
			if h.Park > 0 {
				after.Holders = append(after.Holders, Holder{Park: h.Park})
			}
			continue
		}
		if o := c.Over; o != nil && o.Holder == i && o.Resource == r {
			switch r {
			case nr1.HypervisorQueue:
				h.Queues = o.To
			case nr1.CPUDMAMemory:
				h.CPUMB = o.To
			default:
				h.ComputeMB = o.To
			}
		}
		after.Holders = append(after.Holders, h)
	}
	return after.Held(r)
}

func union(ranges [][2]int64) int64 {
	for i := 1; i < len(ranges); i++ {
		for j := i; j > 0 && ranges[j][0] < ranges[j-1][0]; j-- {
			ranges[j], ranges[j-1] = ranges[j-1], ranges[j]
		}
	}
	var total, end int64 = 0, -1
	for _, rg := range ranges {
		lo := max(rg[0], end)
		if rg[1] > lo {
			total += rg[1] - lo
		}
		end = max(end, rg[1])
	}
	return total
}

// Args are the holder's nr1-load arguments.
func (h Holder) Args(c *Case, index int) []string {
	a := []string{
		"--compute-dma-mb=" + strconv.FormatInt(h.ComputeMB, 10), "--compute-dma-offset-mb=" + strconv.FormatInt(h.ComputeOffsetMB, 10),
		"--cpu-dma-mb=" + strconv.FormatInt(h.CPUMB, 10), "--cpu-dma-offset-mb=" + strconv.FormatInt(h.CPUOffsetMB, 10),
		"--queues=" + strconv.FormatInt(h.Queues, 10),
	}
	if h.Fork > 0 {
		a = append(a, "--fork="+strconv.Itoa(h.Fork))
	}
	if h.Dup > 0 {
		a = append(a, "--dup-queues="+strconv.Itoa(h.Dup))
	}
	if h.InFlight > 0 {
		a = append(a, "--inflight-queues="+strconv.Itoa(h.InFlight))
	}
	if h.Ring > 0 {
		a = append(a, "--ring-queues="+strconv.Itoa(h.Ring))
	}
	if h.Copies > 1 {
		a = append(a, "--copies="+strconv.Itoa(h.Copies))
	}
	if h.RingSlots > 0 {
		a = append(a, "--ring-slots="+strconv.Itoa(h.RingSlots))
	}
	if h.Flood > 0 {
		a = append(a, "--null-fds="+strconv.Itoa(h.Flood))
	}
	if h.Bind {
		a = append(a, "--bind-socket="+socketOf(c.Namespace+"/"+c.Name))
	}
	if h.SendTo != "" {
		a = append(a, "--send-queues-to="+socketOf(h.SendTo))
	}
	if h.Park > 0 {
		a = append(a, "--park-queues="+strconv.Itoa(h.Park), "--park-with="+ParkDir+"/keep.sock")
	}
	if h.Keep {
		a = append(a, "--keep-sockets="+ParkDir+"/keep.sock")
	}
	if h.Probe {
		a = append(a, "--probe="+probeEvery.String())
	}
	if h.Pool > 0 {
		a = append(a, "--pool="+strconv.Itoa(h.Pool), "--pool-hold="+PoolHold.String())
	}
	if o := c.Over; o != nil && o.Holder == index {
		key := "compute"
		switch o.Resource {
		case nr1.HypervisorQueue:
			key = "queues"
		case nr1.CPUDMAMemory:
			key = "cpu"
		case nr1.DockerPartition:
			key = "write"
		}
		a = append(a, fmt.Sprintf("--step=%s:%s=%d", o.At, key, o.To))
	}
	if h.ExitAfter > 0 {
		a = append(a, fmt.Sprintf("--step=%s:queues=%d", h.ExitAfter, h.Queues), "--exit")
	}
	return a
}

// Shape names a case's shape, for the run's table.
func (c *Case) Shape() string {
	s := string(c.Kind) + "/" + c.RestartPolicy
	if c.Kind == SharedClaim {
		s = fmt.Sprintf("%s of %d pods", s, c.Pods)
	}
	var inits, sidecars, others, booking int
	for _, h := range c.Holders {
		switch h.Role {
		case Init:
			inits++
		case Sidecar:
			sidecars++
		default:
			others++
		}
		if h.Books {
			booking++
		}
	}
	s = fmt.Sprintf("%s %d main, %d init, %d sidecar, %d booking", s, others, inits, sidecars, booking)
	var hostile []string
	for _, h := range c.Holders {
		if h.Copies > 1 && !slices.Contains(hostile, "copies") {
			hostile = append(hostile, "copies")
		}
		if h.BigEnv {
			hostile = append(hostile, "big env")
		}
		if h.SendTo != "" {
			hostile = append(hostile, "sends its queues to "+h.SendTo)
		}
		if h.Bind {
			hostile = append(hostile, "a socket a neighbour sends to")
		}
		if h.Park > 0 {
			hostile = append(hostile, "queues parked by a container gone")
		}
	}
	if c.Decoy {
		hostile = append(hostile, "kubelet decoy")
	}
	if c.Marks() != "" {
		hostile = append(hostile, "forged mark")
	}
	if c.SelfUncertain {
		hostile = append(hostile, "own uncertainty")
	}
	if slices.ContainsFunc(c.Holders, func(h Holder) bool { return h.Flood > 0 }) {
		hostile = append(hostile, "fd flood")
	}
	if slices.ContainsFunc(c.Holders, func(h Holder) bool { return h.Pool > 0 }) {
		hostile = append(hostile, "worker pool")
	}
	if slices.ContainsFunc(c.Holders, func(h Holder) bool { return h.Compat }) {
		hostile = append(hostile, "32-bit calls")
	}
	if slices.ContainsFunc(c.Holders, func(h Holder) bool { return h.Role == Sidecar && h.ExitAfter > 0 }) {
		hostile = append(hostile, "restarting sidecar")
	}
	if len(hostile) > 0 {
		s += ", " + strings.Join(hostile, ", ")
	}
	return s
}
