package actuate

import (
	"context"
	"fmt"
	"sync"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/neureality-sdk/nr1-agent/agent/runtime"
)

// CRIStopper stops containers through the CRI runtime.
type CRIStopper struct {
	Endpoint string

	mu   sync.Mutex
	conn *runtime.Conn
}

// StopContainer stops a container, giving it timeout before SIGKILL.
func (s *CRIStopper) StopContainer(ctx context.Context, id string, timeout time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn == nil {
		c, err := runtime.DialFirst(ctx, s.Endpoint)
		if err != nil {
			return err
		}
		s.conn = c
	}
	_, err := s.conn.RS.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: int64(timeout / time.Second)})
	if err != nil {
		_ = s.conn.Close()
		s.conn = nil
		return fmt.Errorf("CRI StopContainer %s: %w", id, err)
	}
	return nil
}
