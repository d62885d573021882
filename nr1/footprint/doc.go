// SPDX-License-Identifier: Apache-2.0

// Package footprint measures what processes hold of the NR1 device files: the bytes of
// their mappings and their open file descriptions, with the detail behind each figure.
// A scan reports records per process and cgroup; Tally sums them per group of the
// caller's choosing. Two sources: BPF iterators (cheap; they also see files held with no
// fd, in flight on a unix socket or registered with an io_uring) and procfs (the
// fallback, which names as a lower bound the cgroups holding what it cannot count). On
// fds and mappings they count the same; BPF reports fewer records (one per description,
// or per range of a file counted in bytes, and cgroup).
//
// Targets (device files by rdev or (dev, ino)), measures (mapped bytes, open handles,
// fdinfo key), `Changes` (the BPF source's syscall tracepoints as a wake-up for the
// sampler, counted; its wake closed if they can no longer be read, and a sampler whose
// wake is closed never rests), the BPF source (every record checked by
// `mappingOf`/`handleOf` before it counts; one the iterators cannot have written fails
// the scan) and the procfs source (maps, fd, map_files for mapped char devices, each fd
// placed among the descriptions met by kcmp(2) binary search as it is read, a refused
// kcmp failing the scan); both read processes in PID order and stop at a cutoff when the
// scan's time is up, drm-usage-stats fdinfo parser.
package footprint
