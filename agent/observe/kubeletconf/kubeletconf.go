// SPDX-License-Identifier: Apache-2.0

package kubeletconf

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"sigs.k8s.io/yaml"

	"github.com/neureality-sdk/nr1-agent/internal/untrusted"
)

// ResourceHealthGate is the kubelet's feature gate for device health in pod status: on,
// the kubelet writes an entry per allocated device of every container into its status.
const ResourceHealthGate = "ResourceHealthStatus"

// MaxFileBytes is the most read of any file for the kubelet's configuration: its command
// line and configuration files are a few KiB, and what is larger is not the kubelet's.
const MaxFileBytes = 1 << 20

// ErrNoKubelet is no kubelet answering on its socket.
var ErrNoKubelet = errors.New("no kubelet answering on its socket")

// Gates is what the kubelet was told of its feature gates: those set, by name, and where
// each was found.
type Gates struct {
	PID    int
	Values map[string]bool
	Source map[string]string
}

// Gate says whether name is set, and to what.
func (g *Gates) Gate(name string) (value, set bool) {
	value, set = g.Values[name]
	return value, set
}

// Read finds the kubelet as the process serving socket (one of the kubelet's own: the
// pod-resources socket) and reads its feature gates among the processes of procRoot: its
// configuration file (--config), then the drop-in directory (--config-dir, in lexical
// order), then its --feature-gates flag, each overriding what came before, as the
// kubelet merges them.
//
// The kubelet is known by who listens on its socket, never by a process's name: any pod
// may run a process named kubelet, and what that process points at (an endless file, a
// FIFO, a file of its own) would otherwise be read.
func Read(ctx context.Context, procRoot, socket string) (*Gates, error) {
	pid, err := kubeletPID(ctx, socket)
	if err != nil {
		return nil, err
	}
	if err := notInAPod(procRoot, pid); err != nil {
		return nil, err
	}
	b, err := readFile(filepath.Join(procRoot, strconv.Itoa(pid), "cmdline"))
	if err != nil {
		return nil, fmt.Errorf("kubelet %d: %w", pid, err)
	}
	flags, gateFlags := parseFlags(strings.Split(strings.TrimRight(string(b), "\x00"), "\x00"))
	g := &Gates{PID: pid, Values: map[string]bool{}, Source: map[string]string{}}
	in := func(path string) string { return hostPath(procRoot, pid, path) }
	if path := flags["config"]; path != "" {
		if err := g.file(in(path), "--config "+path); err != nil {
			return nil, err
		}
	}
	if dir := flags["config-dir"]; dir != "" {
		entries, err := os.ReadDir(in(dir))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("kubelet's --config-dir %s: %w", dir, err)
		}
		names := make([]string, 0, len(entries))
		for _, e := range entries {
			if !e.IsDir() && strings.HasSuffix(e.Name(), ".conf") {
				names = append(names, e.Name())
			}
		}
		sort.Strings(names)
		for _, name := range names {
			if err := g.file(filepath.Join(in(dir), name), "--config-dir "+filepath.Join(dir, name)); err != nil {
				return nil, err
			}
		}
	}
	// Each --feature-gates given is merged over those before it.
	for _, v := range gateFlags {
		for kv := range strings.SplitSeq(v, ",") {
			if strings.TrimSpace(kv) == "" {
				continue
			}
			name, value, _ := strings.Cut(strings.TrimSpace(kv), "=")
			on, err := strconv.ParseBool(strings.TrimSpace(value))
			if name == "" || err != nil {
				return nil, fmt.Errorf("kubelet's --feature-gates %q: %q is not name=bool", v, kv)
			}
			g.Values[name], g.Source[name] = on, "--feature-gates"
		}
	}
	return g, nil
}

// file merges the featureGates of a KubeletConfiguration file.
func (g *Gates) file(path, source string) error {
	b, err := readFile(path)
	if err != nil {
		return fmt.Errorf("kubelet's %s: %w", source, err)
	}
	var cfg struct {
		FeatureGates map[string]bool `json:"featureGates"`
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		return fmt.Errorf("kubelet's %s: %w", source, err)
	}
	for name, on := range cfg.FeatureGates {
		g.Values[name], g.Source[name] = on, source
	}
	return nil
}

// readFile reads path whole when it is a regular file of at most MaxFileBytes. The file
// is first opened without reading rights (O_PATH: opening a FIFO or a device does
// nothing), checked, and only then opened for reading, so nothing read can block the
// agent, grow it, or open a device.
func readFile(path string) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer func() { _ = unix.Close(fd) }()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("%s: not a regular file (mode %#o)", path, st.Mode&unix.S_IFMT)
	}
	// The file reopened through its descriptor is the one checked, whatever its path names now.
	f, err := os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", fd), os.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	defer func() { _ = f.Close() }()
	b, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(b) > MaxFileBytes {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, MaxFileBytes)
	}
	return b, nil
}

// dialTimeout bounds the connection that asks the kernel who listens on the socket.
const dialTimeout = 2 * time.Second

// kubeletPID is the process listening on socket, as the kernel tells it (SO_PEERCRED).
// The connection sends nothing: a gRPC server takes a client gone before its preface as
// an ordinary end.
func kubeletPID(ctx context.Context, socket string) (int, error) {
	d := net.Dialer{Timeout: dialTimeout}
	conn, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return 0, fmt.Errorf("%w: %s: %w", ErrNoKubelet, socket, err)
	}
	defer func() { _ = conn.Close() }()
	raw, err := conn.(*net.UnixConn).SyscallConn()
	if err != nil {
		return 0, fmt.Errorf("the kubelet's socket %s: %w", socket, err)
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, fmt.Errorf("the kubelet's socket %s: %w", socket, err)
	}
	if credErr != nil {
		return 0, fmt.Errorf("the kubelet's socket %s: its peer's credentials: %w", socket, credErr)
	}
	// 0: the listener is in a PID namespace this one does not see (the agent without the
	// host's PIDs).
	if cred.Pid <= 0 {
		return 0, fmt.Errorf("the kubelet's socket %s: its process is not visible from the agent's PID namespace", socket)
	}
	return int(cred.Pid), nil
}

// notInAPod refuses a process in a pod's cgroup: whatever serves the socket there is no
// kubelet, and its files are a pod's to choose.
func notInAPod(procRoot string, pid int) error {
	b, err := readFile(filepath.Join(procRoot, strconv.Itoa(pid), "cgroup"))
	if err != nil {
		return fmt.Errorf("kubelet %d: %w", pid, err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		_, path, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		_, path, _ = strings.Cut(path, ":")
		for elem := range strings.SplitSeq(path, "/") {
			if strings.HasPrefix(elem, "kubepods") {
				return fmt.Errorf("the process %d serving the kubelet's socket is in a pod's cgroup %s: not the kubelet", pid, untrusted.Quote(path))
			}
		}
	}
	return nil
}

// parseFlags reads --name=value and --name value flags; a flag given twice keeps the
// last, as the kubelet's flag parsing does, except --feature-gates, whose every value is
// returned in order: the kubelet merges them.
func parseFlags(args []string) (flags map[string]string, gates []string) {
	out := map[string]string{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !hasValue && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			value = args[i+1]
			i++
		}
		out[name] = value
		if name == "feature-gates" {
			gates = append(gates, value)
		}
	}
	return out, gates
}

// hostPath is path as the kubelet sees it: through its root, from its working directory
// when relative.
func hostPath(procRoot string, pid int, path string) string {
	base := filepath.Join(procRoot, strconv.Itoa(pid))
	if filepath.IsAbs(path) {
		return filepath.Join(base, "root", path)
	}
	return filepath.Join(base, "cwd", path)
}

// ResourceHealth says whether the kubelet writes resource health into pod statuses, and
// why that is thought: the gate as set for the kubelet, or else its default, on since
// Kubernetes 1.36 (the kubelet's version is not read: a gate not set counts as on). err
// is why the gates are unknown: on is then the default.
func ResourceHealth(ctx context.Context, procRoot, socket string) (on bool, why string, err error) {
	g, err := Read(ctx, procRoot, socket)
	if err != nil {
		return true, fmt.Sprintf("the kubelet's feature gates could not be read (%v), and %s is on by default since Kubernetes 1.36", err, ResourceHealthGate), err
	}
	if on, set := g.Gate(ResourceHealthGate); set {
		return on, fmt.Sprintf("%s=%t in the kubelet's %s", ResourceHealthGate, on, g.Source[ResourceHealthGate]), nil
	}
	return true, fmt.Sprintf("%s is not set for the kubelet, and is on by default since Kubernetes 1.36", ResourceHealthGate), nil
}
