// SPDX-License-Identifier: Apache-2.0

//go:build e2e && trust

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/neureality-sdk/nr1-agent/deploy/trust"
)

// moveWorkers moves, at each holder's MoveAt, its first forked worker into a child
// cgroup of its container's cgroup, as a container managing its own cgroup can: the CG
// holds the same, from a cgroup the agent must find below the container's. A worker
// that cannot be moved then (its pod not running, a fault under way) is logged, not
// failed: the move is a way to hold, not something judged.
func (r *trustRun) moveWorkers(ctx context.Context) {
	type move struct {
		tc *trust.Case
		h  trust.Holder
	}
	var moves []move
	for i := range r.plan.Cases {
		for _, h := range r.plan.Cases[i].Holders {
			if h.MoveAt > 0 {
				moves = append(moves, move{&r.plan.Cases[i], h})
			}
		}
	}
	slices.SortFunc(moves, func(a, b move) int { return int(a.h.MoveAt - b.h.MoveAt) })
	for _, m := range moves {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(r.start.Add(m.h.MoveAt))):
		}
		ns := r.ns(m.tc.Namespace)
		levels := 1
		if m.h.MoveDeep {
			levels = deepLevels
		}
		dir, pid, err := r.moveWorker(ctx, ns, m.tc.Name, m.h.Name, levels)
		if err != nil {
			r.t.Logf("%s: %s/%s %s: worker not moved: %v", m.h.MoveAt.Round(time.Second), ns, m.tc.Name, m.h.Name, err)
			continue
		}
		r.mu.Lock()
		r.moved++
		r.mu.Unlock()
		r.t.Logf("%s: %s/%s %s: worker %d moved %d levels below %s", m.h.MoveAt.Round(time.Second), ns, m.tc.Name, m.h.Name, pid, levels, dir)
	}
}

// moveWorker finds the running container of the case's pod through CRI, its cgroup v2
// directory through its process, and the worker among the directory's processes.
func (r *trustRun) moveWorker(ctx context.Context, ns, name, container string, levels int) (string, int, error) {
	pods, err := r.c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: caseLabel + "=" + name})
	if err != nil {
		return "", 0, err
	}
	for _, pod := range pods.Items {
		if pod.Status.Phase != corev1.PodRunning || pod.DeletionTimestamp != nil {
			continue
		}
		out, err := runErr("crictl", "ps", "-q", "--state", "running", "--label", "io.kubernetes.pod.uid="+string(pod.UID), "--name", "^"+container+"$")
		if err != nil {
			return "", 0, err
		}
		id, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
		if id == "" {
			continue
		}
		b, err := runErr("crictl", "inspect", "-o", "json", id)
		if err != nil {
			return "", 0, err
		}
		var st struct {
			Info struct {
				PID int `json:"pid"`
			} `json:"info"`
		}
		if err := json.Unmarshal(b, &st); err != nil || st.Info.PID == 0 {
			return "", 0, fmt.Errorf("container %s: no PID (%w)", id, err)
		}
		dir, err := cgroupV2Dir(st.Info.PID)
		if err != nil {
			return "", 0, err
		}
		worker, err := workerIn(dir)
		if err != nil {
			return "", 0, err
		}
		n, err := nestCgroups(dir, levels)
		if err != nil {
			return "", 0, err
		}
		if err := n.move(worker); err != nil {
			n.remove()
			return "", 0, err
		}
		reap(n)
		return dir, worker, nil
	}
	return "", 0, errors.New("no running container")
}

// cgroupV2Dir is the directory of process pid's cgroup in the v2 hierarchy.
func cgroupV2Dir(pid int) (string, error) {
	mounts, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return "", err
	}
	var root string
	sc := bufio.NewScanner(bytes.NewReader(mounts))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) > 2 && f[2] == "cgroup2" {
			root = f[1]
			break
		}
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return "", err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if path, ok := strings.CutPrefix(line, "0::"); ok && root != "" {
			return filepath.Join(root, path), nil
		}
	}
	return "", fmt.Errorf("process %d: no cgroup v2 (mounted at %q)", pid, root)
}

// workerIn picks nr1-load's first --fork worker among the processes of cgroup dir.
func workerIn(dir string) (int, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return 0, err
	}
	for f := range strings.FieldsSeq(string(b)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			continue
		}
		if cmd, err := os.ReadFile(filepath.Join("/proc", f, "cmdline")); err == nil && bytes.Contains(cmd, []byte("__nr1-load-fork-worker")) {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no worker in %s", dir)
}

// reap removes the nest once no process is left in it (its worker killed, its pod
// stopped, the run's pods deleted), so that the runtime and the kubelet can remove the
// cgroups above it.
func reap(n *nest) {
	go func() {
		for deadline := time.Now().Add(time.Hour); n.populated() && time.Now().Before(deadline); {
			time.Sleep(2 * time.Second)
		}
		n.remove()
	}()
}
