// SPDX-License-Identifier: Apache-2.0

// Command pause is the pod sandbox's process for the local node stack, which has no
// registry to pull the usual pause image from: it waits for a signal and exits.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
}
