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
)

// Device is a character device by its major and minor numbers.
type Device = throttleDevKey

// Throttle attaches the device-deny program to cgroups and keeps each attachment pinned
// in bpffs under its name, so that it outlives the agent and a restarted agent finds it.
type Throttle struct {
	objs   throttleObjects
	pinDir string
}

// LoadThrottle loads the program denying devices, with its pins under pinDir (in bpffs).
func LoadThrottle(pinDir string, devices []Device) (*Throttle, error) {
	// The nearest existing directory tells which file system the pins would land in.
	d := pinDir
	var st unix.Statfs_t
	for unix.Statfs(d, &st) != nil && d != filepath.Dir(d) {
		d = filepath.Dir(d)
	}
	if st.Type != unix.BPF_FS_MAGIC {
		return nil, fmt.Errorf("throttle pins: %s is not in a mounted bpffs", pinDir)
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

// Close releases the program; pinned attachments stay.
func (t *Throttle) Close() error { return t.objs.Close() }

func (t *Throttle) pin(name string) string { return filepath.Join(t.pinDir, name) }

// Attach denies the devices to cgroupDir (a cgroup v2 directory) and everything below
// it, pinned as name. Attaching a name already pinned does nothing.
func (t *Throttle) Attach(name, cgroupDir string) error {
	if _, err := os.Stat(t.pin(name)); err == nil {
		return nil
	}
	l, err := link.AttachCgroup(link.CgroupOptions{Path: cgroupDir, Attach: ebpf.AttachCGroupDevice, Program: t.objs.Nr1Throttle})
	if err != nil {
		return fmt.Errorf("attaching throttle to %s: %w", cgroupDir, err)
	}
	defer l.Close()
	if err := l.Pin(t.pin(name)); err != nil {
		return fmt.Errorf("pinning throttle of %s: %w", name, err)
	}
	return nil
}

// Detach lifts the throttle pinned as name; lifting one that is not there does nothing.
func (t *Throttle) Detach(name string) error { return Unpin(t.pinDir, name) }

// Attached lists the pinned throttles' names.
func (t *Throttle) Attached() ([]string, error) {
	if _, err := os.Stat(t.pinDir); err != nil {
		return nil, fmt.Errorf("throttle pins: %w", err)
	}
	return Pinned(t.pinDir)
}

// Pinned lists the names of the throttles pinned in pinDir, none when it does not exist.
// It needs no program loaded: `nr1-agent cleanup` reads the pins an agent left.
func Pinned(pinDir string) ([]string, error) {
	entries, err := os.ReadDir(pinDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("throttle pins: %w", err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names, nil
}

// Unpin lifts the throttle pinned in pinDir as name: the link is detached from its
// cgroup and its pin removed. It needs no program loaded; an absent pin is no error.
func Unpin(pinDir, name string) error {
	l, err := link.LoadPinnedLink(filepath.Join(pinDir, name), nil)
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
