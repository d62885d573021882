// SPDX-License-Identifier: Apache-2.0

package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/neureality-sdk/nr1-agent/agent/config"
	"github.com/neureality-sdk/nr1-agent/agent/observe/cgroup"
	"github.com/neureality-sdk/nr1-agent/bpf"
	"github.com/neureality-sdk/nr1-agent/internal/untrusted"
)

// cleanup undoes on this node what the agent did: it thaws the frozen cgroups of the pods
// it throttled, removes every throttle pin (which detaches the device program) and the
// budget gate, then the agent's bpffs directories and its enforcement checkpoint, which
// a later agent must not take for its own. A pin is named by its pod's UID, so only the cgroups of those pods
// are thawed. The pin of a pod that could not be thawed is kept, and the checkpoint with
// it, so that running cleanup again finds that pod. Each thing undone is written to out;
// what could not be is returned.
func cleanup(cfg *config.Config, out io.Writer) error {
	u := &undoer{out: out}
	if err := u.throttles(cfg.ThrottlePins(), cfg.Paths.Cgroupfs); err != nil {
		return err
	}
	u.gate(cfg.GatePins())
	paths := []string{cfg.ThrottlePins(), filepath.Dir(cfg.ThrottlePins())}
	if len(u.errs) == 0 {
		partial, _ := filepath.Glob(filepath.Join(cfg.Paths.State, ".checkpoint-*")) // a crash's leftovers
		paths = append(append(paths, cfg.EnforcementCheckpoint()), partial...)
		paths = append(paths, cfg.Paths.State)
	}
	for _, p := range paths {
		u.remove(p)
	}
	if u.did == 0 && len(u.errs) == 0 {
		fmt.Fprintln(out, "nothing to clean up")
	}
	return errors.Join(u.errs...)
}

// undoer counts what it undid and collects what it could not.
type undoer struct {
	out  io.Writer
	did  int
	errs []error
}

// throttles thaws the frozen cgroups of the throttled pods and removes their throttles.
// The error is for cgroups that could not be searched: every throttle is then kept.
func (u *undoer) throttles(pinDir, cgroupfs string) error {
	uids, strays, err := bpf.Pinned(pinDir)
	if err != nil {
		return err
	}
	for _, s := range strays {
		// The agent names every pin by a pod UID: anything else is not its own to remove.
		fmt.Fprintf(u.out, "left %s: not named by a pod UID, so not a throttle of the agent\n", untrusted.Quote(filepath.Join(pinDir, s)))
	}
	if len(uids) == 0 {
		return nil
	}
	failed, err := u.thaw(cgroupfs, uids)
	if err != nil {
		return fmt.Errorf("%w; every throttle kept, so that cleanup can be run again", err)
	}
	for _, uid := range uids {
		if e := failed[uid]; e != nil {
			u.errs = append(u.errs, fmt.Errorf("%w; throttle of pod %s kept, so that cleanup can be run again", e, uid))
			continue
		}
		if err := bpf.Unpin(pinDir, uid); err != nil {
			u.errs = append(u.errs, err)
			continue
		}
		u.done("removed the throttle of pod %s (%s)", uid, filepath.Join(pinDir, uid))
	}
	return nil
}

// gate lifts the budget gate pinned in pinDir, if there is one: no open is refused then.
func (u *undoer) gate(pinDir string) {
	if _, err := os.Stat(pinDir); errors.Is(err, fs.ErrNotExist) { //nolint:gosec // the agent's own configuration
		return
	}
	if err := bpf.RemoveGate(pinDir); err != nil {
		u.errs = append(u.errs, err)
		return
	}
	u.done("removed the budget gate (%s)", pinDir)
}

// thaw thaws the frozen cgroups of the pods with these UIDs and returns, per pod, what
// failed; the error is for cgroups that could not be searched.
func (u *undoer) thaw(cgroupfs string, uids []string) (map[string]error, error) {
	h, err := cgroup.Detect(cgroupfs)
	if err != nil {
		return nil, err
	}
	frozen, err := h.FrozenPods(uids)
	if err != nil {
		return nil, err
	}
	failed := map[string]error{}
	for _, p := range frozen {
		if err := h.ThawPod(p); err != nil {
			failed[p.UID] = errors.Join(failed[p.UID], err)
			continue
		}
		u.done("thawed pod %s (%s)", p.UID, p.Dir)
	}
	return failed, nil
}

// remove removes a file, or a directory once empty. One that is not there, not empty, or
// a mount point (the state directory inside the agent's pod) is left without a word.
func (u *undoer) remove(path string) {
	err := os.Remove(path) //nolint:gosec // paths from the agent's own configuration
	switch {
	case err == nil:
		u.done("removed %s", path)
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTEMPTY), errors.Is(err, syscall.EEXIST), errors.Is(err, syscall.EBUSY):
	default:
		u.errs = append(u.errs, err)
	}
}

func (u *undoer) done(format string, args ...any) {
	fmt.Fprintf(u.out, format+"\n", args...)
	u.did++
}
