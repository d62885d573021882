// SPDX-License-Identifier: Apache-2.0

// Package served keeps a gRPC server served on a unix socket for the kubelet to find:
// the device plugins' sockets and the DRA driver's. One engine for both offers: it
// listens, tells its socket from any file that replaces it by inode and birth time,
// removes only its own, serves again after one backoff when its listener fails, and
// serves anew when its socket is removed or replaced (seen by fsnotify on the socket's
// directory, and checked again at every Check) or when the owner says it is stale.
//
// A gRPC server kept served on a unix socket for the kubelet, the one engine of both
// offers: listen (a stale file at the path removed), tell its socket from a replacement
// by inode and birth time, serve anew when the socket is removed or replaced (fsnotify
// on its directory, and a check every `Check`) or its owner calls it stale, serve again
// after one backoff (`Backoff`, on the injected clock) when the listener fails, stop
// gracefully within 2 s and remove only its own socket; the owner hears of each serve
// and loss. The first serve takes its path whatever is there (a stale socket, or a
// predecessor's); a later one leaves a path another server answers on (a successor's,
// which the two would otherwise take from each other) and tries again on its backoff.
package served
