// SPDX-License-Identifier: Apache-2.0

package dra

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"google.golang.org/grpc"

	"github.com/neureality-sdk/nr1-agent/internal/served"
)

// Defaults of how a served socket is watched: how often it is checked besides the
// events of its directory, and how long the registration socket may be served without
// the kubelet registering the plugin before it is served anew, a new socket the
// kubelet's plugin watcher sees.
const (
	defaultCheckEvery        = 2 * time.Second
	defaultRegistrationGrace = 30 * time.Second
)

// serve serves register's services on the socket at path until ctx ends or the socket
// is stopped, served again on the same path whenever it is lost (internal/served): the
// kubelet finds it again, its plugin watcher registering a new registration socket
// anew, and its client of the DRA socket reconnecting to the path. stale, when given,
// says when a socket served a while must be served anew.
func (d *Driver) serve(ctx context.Context, path string, register func(*grpc.Server), stale ...func(time.Time) string) (*served.Socket, error) {
	o := served.Options{
		Dir:  filepath.Dir(path),
		Name: func() string { return filepath.Base(path) },
		New: func(string) (*grpc.Server, func()) {
			s := grpc.NewServer()
			register(s)
			return s, nil
		},
		Check:  d.checkEvery,
		Listen: d.listen,
		What:   "DRA plugin socket",
		Clock:  d.clock,
		Log:    d.log,
	}
	if len(stale) > 0 {
		o.Stale = stale[0]
	}
	return served.Serve(ctx, o)
}

// unregistered says why the registration socket must be served anew: served a while
// and the kubelet has not registered the plugin. Its plugin watcher finds sockets by
// their creation; a new socket is found again.
func (d *Driver) unregistered(servedAt time.Time) string {
	if d.registered.Load() {
		return ""
	}
	if waited := d.clock.Since(servedAt); waited > d.registrationGrace {
		return fmt.Sprintf("the kubelet has not registered the plugin %s after the socket was served", waited.Round(time.Second))
	}
	return ""
}
