// SPDX-License-Identifier: Apache-2.0

package inventory

import (
	"io"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/neureality-sdk/nr1-agent/agent/observe/allocation"
	"github.com/neureality-sdk/nr1-agent/agent/observe/runtime"
	"github.com/neureality-sdk/nr1-agent/agent/view"
	"github.com/neureality-sdk/nr1-agent/nr1"
)

// randomAnnotations are Allocate annotations as a pod could leave them: none, some,
// each a figure or garbage.
func randomAnnotations(r *rand.Rand) map[string]string {
	out := map[string]string{}
	for _, res := range nr1.All {
		switch r.IntN(4) {
		case 0:
		case 1:
			out[res.Annotation()] = "x" + strconv.Itoa(r.IntN(9))
		default:
			out[res.Annotation()] = strconv.Itoa(r.IntN(3))
		}
	}
	return out
}

// The device plugin's answer for a container the kubelet lists is the kubelet's figure,
// whatever its annotations say; they only make a problem of the latest instance that
// reads and disagrees, counted once however often it is asked.
func TestPluginBooksTheKubeletsFigureWins(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		p := &pluginBooks{log: slog.New(slog.NewTextHandler(io.Discard, nil)), reported: map[string]string{}}
		var kubelet nr1.Amounts
		for _, res := range nr1.All {
			kubelet[res] = nr1.Units(r.IntN(3))
		}
		c := &runtime.Container{ID: "c" + strconv.Itoa(i), Name: "graph", State: view.Running, Annotations: randomAnnotations(r)}
		compare := r.IntN(2) == 0
		annotated, found, err := allocation.FromAnnotations(c.Annotations)
		disagrees := compare && err == nil && found && annotated != kubelet
		counted := compare && (err != nil || disagrees)
		for range 3 {
			units, problem := p.listed(&view.CG{}, c, kubelet, compare)
			if units != kubelet {
				t.Fatalf("case %d: the kubelet's %v became %v (annotations %v)", i, kubelet, units, c.Annotations)
			}
			if (problem != "") != disagrees {
				t.Fatalf("case %d: problem %q, want one: %v (annotations %v, compared %v, kubelet %v)", i, problem, disagrees, c.Annotations, compare, kubelet)
			}
		}
		if got, want := p.mismatches.Load(), map[bool]int64{false: 0, true: 1}[counted]; got != want {
			t.Fatalf("case %d: counted %d disagreements, want %d (annotations %v)", i, got, want, c.Annotations)
		}
		p.forget(map[string]bool{})
		if len(p.reported) != 0 {
			t.Fatalf("case %d: a container gone is still remembered", i)
		}
	}
}

// For a container the kubelet does not list, the device plugin's answer is its
// annotations; unreadable ones are a problem only while it runs, and never a figure.
func TestPluginBooksAnInitContainerByItsAnnotations(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	p := &pluginBooks{log: slog.New(slog.NewTextHandler(io.Discard, nil)), reported: map[string]string{}}
	for i := range 2000 {
		state := []view.ContainerState{view.Running, view.Exited, view.Created}[r.IntN(3)]
		c := &runtime.Container{ID: "init", Name: "init", State: state, Annotations: randomAnnotations(r)}
		annotated, found, err := allocation.FromAnnotations(c.Annotations)
		units, gotFound, problem := p.unlisted(c)
		switch {
		case err != nil:
			if gotFound || units != (nr1.Amounts{}) || (problem != "") != (state == view.Running) {
				t.Fatalf("case %d (%v): unreadable %v gave %v found %v problem %q", i, state, c.Annotations, units, gotFound, problem)
			}
		case units != annotated || gotFound != found || problem != "":
			t.Fatalf("case %d: %v read as %v found %v problem %q, want %v found %v", i, c.Annotations, units, gotFound, problem, annotated, found)
		}
	}
}
