// SPDX-License-Identifier: Apache-2.0

// Command nr1-sim creates, flips and removes a simulated NR1 (see package nr1/sim).
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/neureality-sdk/nr1-agent/nr1"
	"github.com/neureality-sdk/nr1-agent/nr1/sim"
)

const usage = `usage: nr1-sim [--dir DIR] create [--capacity C,P,D,Q] [--queue-device MAJ:MIN]
       nr1-sim [--dir DIR] health ok|fault
       nr1-sim [--dir DIR] remove`

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "nr1-sim: %v\n", err)
		os.Exit(2)
	}
}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("nr1-sim", flag.ContinueOnError)
	dir := fs.String("dir", "/run/nr1-sim", "simulator directory")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return fmt.Errorf("no command\n%s", usage)
	}
	switch cmd, rest := fs.Arg(0), fs.Args()[1:]; cmd {
	case "create":
		return create(*dir, rest, out)
	case "health":
		if len(rest) != 1 || (rest[0] != "ok" && rest[0] != "fault") {
			return fmt.Errorf("health wants ok or fault\n%s", usage)
		}
		return sim.Open(*dir).SetHealthy(rest[0] == "ok")
	case "remove":
		return sim.Open(*dir).Remove()
	default:
		return fmt.Errorf("unknown command %q\n%s", cmd, usage)
	}
}

func create(dir string, args []string, out io.Writer) error {
	opts := sim.DefaultOptions()
	fs := flag.NewFlagSet("create", flag.ContinueOnError)
	fs.Func("capacity", "capacities: compute DMA MB, CPU DMA MB, docker partition MB, queues", func(v string) error {
		parts := strings.Split(v, ",")
		if len(parts) != nr1.NumResources {
			return fmt.Errorf("want %d comma-separated integers, got %q", nr1.NumResources, v)
		}
		for i, p := range parts {
			n, err := strconv.ParseInt(strings.TrimSpace(p), 10, 64)
			if err != nil || n < 0 {
				return fmt.Errorf("capacity of %s: want a non-negative integer, got %q", nr1.All[i], p)
			}
			opts.Capacity[i] = nr1.Units(n)
		}
		return nil
	})
	fs.Func("queue-device", "major:minor of the queue character device", func(v string) error {
		_, err := fmt.Sscanf(v, "%d:%d", &opts.QueueMajor, &opts.QueueMinor)
		if err != nil {
			return fmt.Errorf("want MAJOR:MINOR, got %q", v)
		}
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return err
	}
	s, err := sim.Create(dir, opts)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "simulated NR1 in %s: %v, sysfs root %s\n", s.Dir, opts.Capacity, s.SysfsRoot())
	return nil
}
