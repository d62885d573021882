// SPDX-License-Identifier: Apache-2.0

package footprint

import (
	"context"
	"fmt"
	"os"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/neureality-sdk/nr1-agent/bpf"
	"github.com/neureality-sdk/nr1-agent/nr1/sim"
)

func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkScan scans the 300-process population with each source, side by side, and
// reports the CPU time (user and system, the kernel's iterator work included) a scan
// every second takes of one core. bpf-mappers is the BPF source walking the mappings of
// the processes that may map a target only, as the agent's does between its passes
// over every process (FullMappingPass).
func BenchmarkScan(b *testing.B) {
	p := newPopulation(b)
	mappers := newBPFOrSkip(b, p)
	if err := mappers.FollowMappers(); err != nil {
		b.Fatal(err)
	}
	mappers.lastFull = time.Now().Add(time.Hour) // no pass over every process but the first
	sources := []struct {
		name string
		Source
	}{{"bpf", newBPFOrSkip(b, p)}, {"bpf-mappers", mappers}, {"procfs", NewProcfs("/proc", p.cgroupV2, p.targets)}}
	for _, src := range sources {
		b.Run(src.name, func(b *testing.B) {
			ctx := context.Background()
			start := cpuTime(b)
			for b.Loop() {
				if _, err := src.Scan(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(100*float64(cpuTime(b)-start)/float64(b.N)/float64(time.Second), "%core@1s")
		})
	}
}

// BenchmarkScanUnderFloods scans a node where one CG floods, with each source side by
// side: nothing (the baseline: this machine's own processes), one queue description
// behind 105007 fds (a process dup()ing it 15000 times and six forked children), and
// 30000 single-page mappings. records/op is what a scan hands on to the sample.
func BenchmarkScanUnderFloods(b *testing.B) {
	floods := []struct {
		name string
		spec func(p *population) mapperSpec
	}{
		{"baseline", nil},
		{"fds-105k", func(p *population) mapperSpec {
			return mapperSpec{Open: []string{p.sim.File(sim.HypervisorQ)}, Dups: 15000, Forks: 6}
		}},
		{"mappings-30k", func(p *population) mapperSpec {
			return mapperSpec{TinyMaps: 30000, TinyFile: p.sim.File(sim.ComputeDMA)}
		}},
	}
	for _, f := range floods {
		b.Run(f.name, func(b *testing.B) {
			p, _ := newCgroups(b, 1)
			if f.spec != nil {
				p.startMapper(b, 0, f.spec(p))
			}
			for _, src := range []Source{newBPFOrSkip(b, p), NewProcfs("/proc", p.cgroupV2, p.targets)} {
				b.Run(src.Name(), func(b *testing.B) {
					ctx := context.Background()
					start, records := cpuTime(b), 0
					for b.Loop() {
						s, err := src.Scan(ctx)
						if err != nil {
							b.Fatal(err)
						}
						records = len(s.Mappings) + len(s.Handles)
					}
					b.ReportMetric(100*float64(cpuTime(b)-start)/float64(b.N)/float64(time.Second), "%core@1s")
					b.ReportMetric(float64(records), "records/op")
				})
			}
		})
	}
}

// BenchmarkScanBesideAHeavyUnit scans a node where one cgroup's 557 processes hold
// 18000 fds each, ten million in all (the e2e flood), past what a scan walks of a unit:
// walked at every scan (rest=0), and resting after each walk (HeavyRest), as
// the agent's scans do, whose change-started ones come a gap (50 ms) apart. ns/op is a
// scan's time, what a change waits for; the first scan, which finds the unit heavy, is
// not counted.
func BenchmarkScanBesideAHeavyUnit(b *testing.B) {
	p, _ := newCgroups(b, 1)
	p.startMapper(b, 0, mapperSpec{Open: []string{os.DevNull}, Dups: 18000, Forks: 556})
	for _, rest := range []time.Duration{0, HeavyRest} {
		b.Run(fmt.Sprintf("rest=%v", rest), func(b *testing.B) {
			src := newBPFOrSkip(b, p)
			src.rest = rest
			if err := src.FollowMappers(); err != nil { // as the agent's
				b.Fatal(err)
			}
			ctx := context.Background()
			if _, err := src.Scan(ctx); err != nil {
				b.Fatal(err)
			}
			start := cpuTime(b)
			for b.Loop() {
				s, err := src.Scan(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if !slices.Contains(s.Unfinished, p.ids[0]) {
					b.Fatalf("unfinished %v, want the flood's cgroup %d", s.Unfinished, p.ids[0])
				}
			}
			b.ReportMetric(100*float64(cpuTime(b)-start)/float64(b.N)/float64(time.Second), "%core@1s")
		})
	}
}

// BenchmarkInFlightPass is the pass over what sockets hold in flight, on this node's
// network namespaces and with 100 more, one per process as a pod's (holding two queues
// in flight each): the pass enters each namespace to read its sockets, within a quarter
// of the scan's time. ms/netns is one namespace's share.
func BenchmarkInFlightPass(b *testing.B) {
	for _, extra := range []int{0, 100} {
		b.Run(fmt.Sprintf("pods=%d", extra), func(b *testing.B) {
			p, _ := newCgroups(b, 1)
			queue := p.sim.File(sim.HypervisorQ)
			for range extra {
				p.startMapper(b, 0, mapperSpec{InFlight: []string{queue, queue}, NewNetNS: true})
			}
			src := newBPFOrSkip(b, p)
			ctx := context.Background()
			var namespaces, records int
			for b.Loop() {
				ns := netNamespaces("/proc")
				namespaces, records = len(ns.paths), 0
				if err := src.fp.InFlight(ctx, ns.paths, func(*bpf.Flight) error { records++; return nil }); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(namespaces), "netns")
			b.ReportMetric(float64(records), "records/op")
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N)/float64(namespaces), "ms/netns")
		})
	}
}
