// SPDX-License-Identifier: Apache-2.0

package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/neureality-sdk/nr1-agent/agent/view"
	"github.com/neureality-sdk/nr1-agent/nr1"
)

// DefaultEndpoints are the runtimes' standard sockets, tried in order when no endpoint
// is configured.
var DefaultEndpoints = []string{
	"unix:///run/containerd/containerd.sock",
	"unix:///run/crio/crio.sock",
	"unix:///var/run/containerd/containerd.sock",
	"unix:///var/run/crio/crio.sock",
}

// Conn is a connection to a CRI runtime.
type Conn struct {
	Endpoint string
	Runtime  string // name and version, from the Version call
	RS       runtimeapi.RuntimeServiceClient
	IS       runtimeapi.ImageServiceClient
	cc       *grpc.ClientConn
}

// Close closes the connection.
func (c *Conn) Close() error { return c.cc.Close() }

// Dial connects to endpoint and checks it with the Version call. The connection is
// kept for the agent's life: gRPC reconnects by itself, within reconnectDelay of the
// runtime's return, and calls fail at once while it is away.
func Dial(ctx context.Context, endpoint string) (*Conn, error) {
	cc, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16<<20)),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: reconnectDelay},
			MinConnectTimeout: time.Second,
		}))
	if err != nil {
		return nil, fmt.Errorf("CRI endpoint %s: %w", endpoint, err)
	}
	c := &Conn{Endpoint: endpoint, RS: runtimeapi.NewRuntimeServiceClient(cc), IS: runtimeapi.NewImageServiceClient(cc), cc: cc}
	if err := c.version(ctx); err != nil {
		_ = cc.Close()
		return nil, err
	}
	return c, nil
}

// reconnectDelay bounds how long after the runtime's return the connection is back.
const reconnectDelay = time.Second

// version asks the runtime its name and version, which also tells it answers.
func (c *Conn) version(ctx context.Context) error {
	vctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	v, err := c.RS.Version(vctx, &runtimeapi.VersionRequest{})
	if err != nil {
		return fmt.Errorf("CRI endpoint %s: version: %w", c.Endpoint, err)
	}
	c.Runtime = v.RuntimeName + " " + v.RuntimeVersion
	return nil
}

// DialFirst connects to endpoint, or, when it is empty, to the first of the standard
// sockets that exists and answers.
func DialFirst(ctx context.Context, endpoint string) (*Conn, error) {
	if endpoint != "" {
		return Dial(ctx, endpoint)
	}
	var errs []error
	for _, e := range DefaultEndpoints {
		if _, err := os.Stat(strings.TrimPrefix(e, "unix://")); err != nil {
			continue
		}
		c, err := Dial(ctx, e)
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		return nil, fmt.Errorf("no CRI runtime socket among %v", DefaultEndpoints)
	}
	return nil, errors.Join(errs...)
}

// verboseInfo is what containerd and CRI-O put in a verbose ContainerStatus's "info":
// the init PID, the OCI spec, and (containerd alone) the CRI config the kubelet sent.
type verboseInfo struct {
	PID    int `json:"pid"`
	Config *struct {
		CDIDevices []struct {
			Name string `json:"name"`
		} `json:"CDI_devices"`
	} `json:"config"`
	RuntimeSpec struct {
		Linux struct {
			CgroupsPath string `json:"cgroupsPath"`
		} `json:"linux"`
		Mounts []Mount `json:"mounts"`
	} `json:"runtimeSpec"`
}

// details is what a verbose status says that the list does not.
type details struct {
	PID         int
	CgroupsPath string
	// CDIDevices are the CDI devices the kubelet gave the container (a DRA claim's
	// share, named by the driver): set by the kubelet alone, never by the pod's spec.
	CDIDevices []string
	// CDIDevicesKnown says the runtime told them (containerd); CRI-O does not.
	CDIDevicesKnown bool
	// ShareMounts are the spec's mounts into nr1.ShareDir, the DRA shares' marks.
	ShareMounts []Mount
}

// maxPID is PID_MAX_LIMIT, the largest process ID Linux hands out.
const maxPID = 1 << 22

// errUnreadable marks a container whose status or verbose info cannot be read, while
// the runtime answers: the container is kept with what the list (and its status, when
// read) says, without a PID or cgroup. One container's problem stays that container's.
var errUnreadable = errors.New("unreadable container status")

// runtimeFailure says whether a failed status call is the runtime's, not the
// container's: the runtime away, hung or the call abandoned. Anything else — an answer
// too large to receive (a container's environment can make its verbose status exceed
// any limit), one the runtime cannot build — concerns that container alone.
func runtimeFailure(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return true
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

// parseVerboseInfo reads the init PID, the OCI spec's cgroupsPath and the CDI devices
// from a verbose ContainerStatus's "info". A PID no process can have is refused; the
// cgroupsPath is checked where it is resolved (cgroup.Hierarchy.Resolve).
func parseVerboseInfo(raw string) (details, error) {
	var info verboseInfo
	if err := json.Unmarshal([]byte(raw), &info); err != nil {
		return details{}, fmt.Errorf("%w: %w", errUnreadable, err)
	}
	if info.PID < 0 || info.PID > maxPID {
		return details{}, fmt.Errorf("%w: pid %d is no process's", errUnreadable, info.PID)
	}
	d := details{PID: info.PID, CgroupsPath: info.RuntimeSpec.Linux.CgroupsPath}
	if info.Config != nil {
		d.CDIDevicesKnown = true
		for _, dev := range info.Config.CDIDevices {
			d.CDIDevices = append(d.CDIDevices, dev.Name)
		}
	}
	for _, m := range info.RuntimeSpec.Mounts {
		if strings.HasPrefix(m.Destination, nr1.ShareDir+"/") {
			d.ShareMounts = append(d.ShareMounts, m)
		}
	}
	return d, nil
}

// containerDetails reads what the list does not say: PID, cgroupsPath, status
// annotations, start time. An error wrapping errUnreadable leaves c with what the list
// said (and its status, when that was read), never a PID or cgroup, and says so in
// c.Unread; so does a status without the runtime's info.
func containerDetails(ctx context.Context, rs runtimeapi.RuntimeServiceClient, c *Container) (err error) {
	defer func() {
		if errors.Is(err, errUnreadable) {
			c.Unread = err.Error()
		}
	}()
	resp, err := rs.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: c.ID, Verbose: true})
	if err != nil {
		if status.Code(err) == codes.NotFound || runtimeFailure(err) {
			return fmt.Errorf("status of container %s: %w", c.ID, err)
		}
		return fmt.Errorf("status of container %s: %w: %w", c.ID, errUnreadable, err)
	}
	st := resp.GetStatus()
	c.State = stateOf(st.GetState())
	c.Annotations = st.GetAnnotations()
	c.Image, c.ImageRef = st.GetImage().GetImage(), st.GetImageRef()
	if st.GetStartedAt() > 0 {
		c.StartedAt = time.Unix(0, st.GetStartedAt())
	}
	if raw, ok := resp.GetInfo()["info"]; ok {
		d, err := parseVerboseInfo(raw)
		if err != nil {
			return fmt.Errorf("status of container %s: %w", c.ID, err)
		}
		c.CgroupsPath, c.CDIDevices, c.CDIDevicesKnown, c.ShareMounts = d.CgroupsPath, d.CDIDevices, d.CDIDevicesKnown, d.ShareMounts
		if c.State == view.Running {
			c.PID = d.PID
		}
		return nil
	}
	c.Unread = "the runtime's status of the container carries no verbose info"
	return nil
}

func stateOf(s runtimeapi.ContainerState) view.ContainerState {
	switch s {
	case runtimeapi.ContainerState_CONTAINER_CREATED:
		return view.Created
	case runtimeapi.ContainerState_CONTAINER_RUNNING:
		return view.Running
	case runtimeapi.ContainerState_CONTAINER_EXITED:
		return view.Exited
	default:
		return view.Unknown
	}
}

func podOf(id string, md *runtimeapi.PodSandboxMetadata, state runtimeapi.PodSandboxState, createdAt int64, labels, annotations map[string]string) *Pod {
	var created time.Time
	if createdAt > 0 {
		created = time.Unix(0, createdAt)
	}
	return &Pod{
		UID: md.GetUid(), Namespace: md.GetNamespace(), Name: md.GetName(), SandboxID: id, CreatedAt: created,
		Ready: state == runtimeapi.PodSandboxState_SANDBOX_READY, Labels: labels, Annotations: annotations,
	}
}
