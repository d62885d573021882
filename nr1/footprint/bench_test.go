package footprint

import (
	"context"
	"syscall"
	"testing"
	"time"
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
// every second takes of one core.
func BenchmarkScan(b *testing.B) {
	p := newPopulation(b)
	bpfSource := newBPFOrSkip(b, p)
	sources := []Source{bpfSource, NewProcfs("/proc", p.cgroupV2, p.targets)}
	for _, src := range sources {
		b.Run(src.Name(), func(b *testing.B) {
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
