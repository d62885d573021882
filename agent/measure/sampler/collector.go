// SPDX-License-Identifier: Apache-2.0

package sampler

import (
	"slices"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/neureality-sdk/nr1-agent/agent/view"
	"github.com/neureality-sdk/nr1-agent/metrics"
	"github.com/neureality-sdk/nr1-agent/nr1"
)

// Samples gives the latest sample.
type Samples interface {
	Load() (*Snapshot, <-chan struct{})
}

// Collector exports every CG's allocation, usage and ratio from the latest sample at
// scrape time: a new CG has series before it consumes anything, and a deleted pod's
// series are gone at the next scrape. Amounts are in base units: memory and the docker
// partition in bytes (an allocation's MB as its 2^20 bytes), queues as counts, each in
// its own family. No label carries a PID, buffer or handle.
type Collector struct {
	samples                                                        Samples
	source, bpfRefused                                             string
	unseen                                                         []string
	allocated, usage, cgAllocated, cgUsage, unattributed           *metrics.Amount
	ratio, unknown, uncertain, sourceDesc, refusedDesc, unseenDesc *prometheus.Desc
}

// NewCollector collects from samples, measured by the footprint source named source;
// bpfRefused says why the BPF source was wanted and refused, empty when it was not;
// unseen names what the source cannot see on this node.
func NewCollector(samples Samples, source, bpfRefused string, unseen []string) *Collector {
	cg, ctr := []string{"namespace", "pod"}, []string{"namespace", "pod", "container"}
	return &Collector{
		samples:      samples,
		source:       source,
		bpfRefused:   bpfRefused,
		unseen:       unseen,
		unseenDesc:   prometheus.NewDesc("nr1_footprint_unseen", "1 for what the footprint source cannot see on this node: 32-bit-syscalls, a kernel with 32-bit system call entries and no kprobes (a CG's int $0x80 mappings are found within the full pass only, its 32-bit sends are charged to the receiving socket's creator, its 32-bit opens stay counted by the gate until a settle, its 32-bit ptrace is unseen).", []string{"what"}, nil),
		sourceDesc:   prometheus.NewDesc("nr1_footprint_source", "The footprint source in use (bpf or procfs).", []string{"source"}, nil),
		refusedDesc:  prometheus.NewDesc("nr1_footprint_bpf_refused", "1 when the BPF footprint source was refused: unavailable (the kernel cannot run it) or unattributable (it cannot tell cgroups apart on this node).", []string{"reason"}, nil),
		allocated:    metrics.NewAmount("nr1_allocated", "NR1 allocated to a container by the kubelet, in %s.", ctr...),
		usage:        metrics.NewAmount("nr1_usage", "What a container holds of the NR1, in %s.", ctr...),
		cgAllocated:  metrics.NewAmount("nr1_cg_allocated", "NR1 allocated to a CG, in %s, what its ratio is over: a DRA claim several of its containers use counts once, and an init container's allocation as the kubelet books it (the larger of it and the rest). Sum this, not its containers' nr1_allocated_*, for what a node has allocated.", cg...),
		cgUsage:      metrics.NewAmount("nr1_cg_usage", "What a CG holds of the NR1, in %s, what its ratio is of: a buffer or queue several of its containers hold counts once.", cg...),
		ratio:        prometheus.NewDesc("nr1_usage_ratio", "A CG's usage over its allocation, summed over its containers; +Inf for usage with no allocation.", append(cg, "resource"), nil),
		unattributed: metrics.NewAmount("nr1_unattributed_usage", "What processes outside every known container hold of the NR1, in %s."),
		uncertain:    prometheus.NewDesc("nr1_usage_uncertain", "1 for a CG whose usage the last scan could not read in full, by cause: its usage is a lower bound, acted on when even that is over. own=\"true\": the cause lies inside the CG (handles in flight or io_uring files past what a scan reads, a process whose fds took the scan past its time), and the enforcement's selfUncertain ladder takes it; own=\"false\": the node's (the scan's time, a cgroup or network namespace not read, no fd to see with procfs), which protects it.", []string{"namespace", "pod", "cause", "own"}, nil),
		unknown:      prometheus.NewDesc("nr1_allocation_unknown", "1 for a pod whose NR1 allocation is not known (not in the kubelet's answer, an answer too old, or Allocate annotations disagreeing): it is neither measured against an allocation nor enforced.", []string{"namespace", "pod"}, nil),
	}
}

// Describe sends the descriptors.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.sourceDesc
	ch <- c.refusedDesc
	ch <- c.unseenDesc
	c.allocated.Describe(ch)
	c.usage.Describe(ch)
	ch <- c.ratio
	c.cgUsage.Describe(ch)
	c.cgAllocated.Describe(ch)
	c.unattributed.Describe(ch)
	ch <- c.unknown
	ch <- c.uncertain
}

// Collect builds the series from the latest sample.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.sourceDesc, prometheus.GaugeValue, 1, c.source)
	if c.bpfRefused != "" {
		ch <- prometheus.MustNewConstMetric(c.refusedDesc, prometheus.GaugeValue, 1, c.bpfRefused)
	}
	for _, what := range c.unseen {
		ch <- prometheus.MustNewConstMetric(c.unseenDesc, prometheus.GaugeValue, 1, what)
	}
	snap, _ := c.samples.Load()
	if snap == nil {
		return
	}
	for _, r := range nr1.All {
		ch <- c.unattributed.Metric(r, snap.Unattributed[r])
	}
	seen := make(map[[2]string]bool, len(snap.CGs))
	for _, cg := range snap.CGs {
		// An ended sandbox the runtime still keeps shares its name with the pod's new
		// one: only ready sandboxes have series, once per pod name.
		key := [2]string{cg.Namespace, cg.Name}
		if !cg.Ready || seen[key] {
			continue
		}
		seen[key] = true
		if !cg.AllocationKnown {
			ch <- prometheus.MustNewConstMetric(c.unknown, prometheus.GaugeValue, 1, cg.Namespace, cg.Name)
			continue
		}
		if cg.UsageUncertain != "" {
			ch <- prometheus.MustNewConstMetric(c.uncertain, prometheus.GaugeValue, 1, cg.Namespace, cg.Name, cg.UncertainCause, strconv.FormatBool(cg.UncertainOwn))
			continue
		}
		// A pod given nothing has no allocation series, as its containers have none.
		if cg.Allocation != (nr1.Amounts{}) {
			for _, r := range nr1.All {
				ch <- c.cgAllocated.Metric(r, r.InBase(cg.Allocation[r]), cg.Namespace, cg.Name)
			}
		}
		// A docker partition not measured yet, or whose reading failed, is unknown: it
		// has no usage or ratio series rather than zeros.
		measured := func(r nr1.Resource) bool { return r != nr1.DockerPartition || cg.PartitionUnknown == "" }
		for _, ctr := range running(cg) {
			used := cg.PerContainer[ctr.Name]
			// A container given nothing (the CG's allocation sits on health-handler) has
			// no allocation series; every container has usage series, zeros included.
			allocated := ctr.Allocation != nr1.Amounts{}
			for _, r := range nr1.All {
				if allocated {
					ch <- c.allocated.Metric(r, r.InBase(ctr.Allocation[r]), cg.Namespace, cg.Name, ctr.Name)
				}
				if measured(r) {
					ch <- c.usage.Metric(r, used[r], cg.Namespace, cg.Name, ctr.Name)
				}
			}
		}
		for _, r := range nr1.All {
			if measured(r) {
				ch <- c.cgUsage.Metric(r, cg.Usage[r], cg.Namespace, cg.Name)
				ch <- prometheus.MustNewConstMetric(c.ratio, prometheus.GaugeValue, float64(cg.Ratio[r]), cg.Namespace, cg.Name, r.Short())
			}
		}
	}
}

// running returns one container per name, the running one started last: the runtime
// keeps a killed or restarted container's exited instance beside its new one, and two
// series sets for one name would fail the whole scrape.
func running(cg *view.Measured) []*view.Container {
	byName := make(map[string]*view.Container, len(cg.Containers))
	out := make([]*view.Container, 0, len(cg.Containers))
	for _, ctr := range cg.Containers {
		if ctr.State != view.Running {
			continue
		}
		prev, ok := byName[ctr.Name]
		switch {
		case !ok:
			out = append(out, ctr)
		case ctr.StartedAt.After(prev.StartedAt):
			out[slices.Index(out, prev)] = ctr
		default:
			continue
		}
		byName[ctr.Name] = ctr
	}
	return out
}

// Duration is the nr1_sample_duration_seconds histogram: each sample's time, inventory
// and attribution included.
func (s *Sampler) Duration() prometheus.Collector { return s.duration }

func newSampleDuration() prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "nr1_sample_duration_seconds",
		Help:    "Time one sample took: the inventory, one footprint scan of every process and the attribution.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
	})
}

// Phases is the nr1_sample_phase_seconds histograms: where each sample's time went, by
// phase (the inventory, the scan's phases, the attribution).
func (s *Sampler) Phases() prometheus.Collector { return s.phases }

func newSamplePhases() *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "nr1_sample_phase_seconds",
		Help:    "Time a phase of a sample took: inventory; of the BPF footprint scan, mappings, members, fds, heavy, namespaces, in-flight, after; attribution.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
	}, []string{"phase"})
}
