// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/neureality-sdk/nr1-agent/internal/untrusted"
)

// Device is a character device by its major and minor numbers.
type Device = throttleDevKey

// Throttle attaches the device-deny program to cgroups and keeps each attachment pinned
// in bpffs under its name, so that it outlives the agent and a restarted agent finds it.
// A name is a pod's UID, which comes from the runtime (or a checkpoint): one that is not
// a pod UID is refused before it becomes a path, so a pin is only ever made, loaded or
// removed directly inside the pin directory.
type Throttle struct {
	objs   throttleObjects
	pinDir string
}

// LoadThrottle loads the program denying devices, with its pins under pinDir (in bpffs).
func LoadThrottle(pinDir string, devices []Device) (*Throttle, error) {
	if err := haveSyscall(); err != nil {
		return nil, fmt.Errorf("loading throttle program: %w", err)
	}
	if err := inBPFFS(pinDir); err != nil {
		return nil, fmt.Errorf("throttle pins: %w", err)
	}
	if err := os.MkdirAll(pinDir, 0o700); err != nil {
		return nil, fmt.Errorf("throttle pins: %w", err)
	}
	t := &Throttle{pinDir: pinDir}
	if err := loadThrottleObjects(&t.objs, nil); err != nil {
		return nil, fmt.Errorf("loading throttle program: %w", err)
	}
	for _, d := range devices {
		if err := t.objs.Denied.Put(d, uint8(1)); err != nil {
			_ = t.objs.Close()
			return nil, fmt.Errorf("denying device %d:%d: %w", d.Major, d.Minor, err)
		}
	}
	return t, nil
}

// inBPFFS fails unless pins made in dir would land in a mounted bpffs: the nearest
// existing directory tells which file system that is.
func inBPFFS(dir string) error {
	d := dir
	var st unix.Statfs_t
	for unix.Statfs(d, &st) != nil && d != filepath.Dir(d) {
		d = filepath.Dir(d)
	}
	if st.Type != unix.BPF_FS_MAGIC {
		return fmt.Errorf("%s is not in a mounted bpffs", dir)
	}
	return nil
}

// Close releases the program; pinned attachments stay.
func (t *Throttle) Close() error { return t.objs.Close() }

// pin is where the throttle named name is pinned in pinDir.
func pin(pinDir, name string) (string, error) {
	if err := untrusted.PodUID(name); err != nil {
		return "", fmt.Errorf("throttle pin: %w", err)
	}
	return filepath.Join(pinDir, name), nil
}

// Attach denies the devices to cgroupDir (a cgroup v2 directory) and everything below
// it, pinned as name. Attaching a name already pinned does nothing.
func (t *Throttle) Attach(name, cgroupDir string) error {
	p, err := pin(t.pinDir, name)
	if err != nil {
		return err
	}
	if _, err := os.Stat(p); err == nil {
		return nil
	}
	l, err := link.AttachCgroup(link.CgroupOptions{Path: cgroupDir, Attach: ebpf.AttachCGroupDevice, Program: t.objs.Nr1Throttle})
	if err != nil {
		return fmt.Errorf("attaching throttle to %s: %w", cgroupDir, err)
	}
	defer l.Close()
	if err := l.Pin(p); err != nil {
		return fmt.Errorf("pinning throttle of %s: %w", name, err)
	}
	return nil
}

// Detach lifts the throttle pinned as name; lifting one that is not there does nothing.
func (t *Throttle) Detach(name string) error { return Unpin(t.pinDir, name) }

// Attached lists the pinned throttles' names, and apart the entries of the pin directory
// that are not named by a pod UID (see Pinned).
func (t *Throttle) Attached() (names, strays []string, err error) {
	if _, err := os.Stat(t.pinDir); err != nil {
		return nil, nil, fmt.Errorf("throttle pins: %w", err)
	}
	return Pinned(t.pinDir)
}

// Pinned lists the names of the throttles pinned in pinDir, none when it does not exist.
// It needs no program loaded: `nr1-agent cleanup` reads the pins an agent left. Entries
// not named by a pod UID were not pinned by the agent, which refuses any other name:
// they are returned apart as strays, for the caller to report and leave alone.
func Pinned(pinDir string) (names, strays []string, err error) {
	entries, err := os.ReadDir(pinDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("throttle pins: %w", err)
	}
	names = make([]string, 0, len(entries))
	for _, e := range entries {
		if untrusted.PodUID(e.Name()) != nil {
			strays = append(strays, e.Name())
			continue
		}
		names = append(names, e.Name())
	}
	return names, strays, nil
}

// Unpin lifts the throttle pinned in pinDir as name: the link is detached from its
// cgroup and its pin removed. It needs no program loaded; an absent pin is no error.
func Unpin(pinDir, name string) error {
	p, err := pin(pinDir, name)
	if err != nil {
		return err
	}
	l, err := link.LoadPinnedLink(p, nil)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("loading throttle of %s: %w", name, err)
	}
	defer l.Close()
	// Detaching at once lifts the throttle even while some process still holds the link;
	// without BPF_LINK_DETACH (before Linux 5.9) the last reference going detaches it.
	if err := l.Detach(); err != nil && !errors.Is(err, ebpf.ErrNotSupported) {
		return fmt.Errorf("detaching throttle of %s: %w", name, err)
	}
	if err := l.Unpin(); err != nil {
		return fmt.Errorf("unpinning throttle of %s: %w", name, err)
	}
	return nil
}
