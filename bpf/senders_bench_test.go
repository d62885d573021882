// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"testing"

	"golang.org/x/sys/unix"
)

// BenchmarkUnixSend is what following senders costs a unix datagram send and its
// receive, one byte each: with no footprint loaded (bare), and with the footprint's
// sendmsg tracepoint marking the sender (followed); a send carrying an fd the same.
func BenchmarkUnixSend(b *testing.B) {
	for _, c := range []struct {
		name     string
		followed bool
		rights   bool
	}{{"bare", false, false}, {"followed", true, false}, {"bare-fd", false, true}, {"followed-fd", true, true}} {
		b.Run(c.name, func(b *testing.B) {
			if c.followed {
				loadOrSkip(b)
			}
			sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				b.Fatal(err)
			}
			defer unix.Close(sp[0])
			defer unix.Close(sp[1])
			var oob []byte
			if c.rights {
				oob = unix.UnixRights(sp[0])
			}
			buf, roob := make([]byte, 1), make([]byte, unix.CmsgSpace(4))
			for b.Loop() {
				if err := unix.Sendmsg(sp[0], buf, oob, nil, 0); err != nil {
					b.Fatal(err)
				}
				_, oobn, _, _, err := unix.Recvmsg(sp[1], buf, roob, 0)
				if err != nil {
					b.Fatal(err)
				}
				if oobn > 0 {
					msgs, _ := unix.ParseSocketControlMessage(roob[:oobn])
					for _, m := range msgs {
						if fds, err := unix.ParseUnixRights(&m); err == nil {
							for _, fd := range fds {
								_ = unix.Close(fd)
							}
						}
					}
				}
			}
		})
	}
}
