// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/neureality-sdk/nr1-agent/nr1"
	"github.com/neureality-sdk/nr1-agent/nr1/manifest"
)

func newInject(o *options) *cobra.Command {
	var resources, mode string
	var containers []string
	cmd := &cobra.Command{
		Use:   "inject -f resources.yaml [-c health-handler] [--mode devicePlugin|dra] POD.yaml",
		Short: "Write a CG's NR1 resources (the toolchain's resources.yaml) into its pod spec",
		Long: `Reads the pod spec (a Pod, a workload's pod template or a List of them; - for stdin)
and writes it to stdout with the CG's NR1 resources, from the resources.yaml the NR1
toolchain wrote beside the CG:
  --mode devicePlugin  the four resources in the container's requests and limits, equal
                       (one container: health-handler by default);
  --mode dra           a ResourceClaimTemplate per pod, the pod's claim of it, and every
                       container named with -c using the claim.
Other objects pass through. A resources.yaml with an unknown key, a negative or
non-integer amount, or a resource missing is refused, naming its line.`,
		Example: `  kubectl nr1 inject -f cg/resources.yaml pod.yaml | kubectl apply -f -
  kubectl nr1 inject -f cg/resources.yaml --mode dra -c health-handler -c graph pod.yaml`,
		Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			if resources == "" {
				return usageError{fmt.Errorf("-f resources.yaml is required")}
			}
			a, err := readResources(resources)
			if err != nil {
				return err
			}
			in, closeIn, err := open(args[0], o.in)
			if err != nil {
				return err
			}
			defer closeIn()
			var out bytes.Buffer
			if err := manifest.Inject(in, &out, a, manifest.Options{Mode: manifest.Mode(mode), Containers: containers}); err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			_, err = o.out.Write(out.Bytes())
			return err //nolint:wrapcheck // the command's output
		},
	}
	cmd.Flags().StringVarP(&resources, "filename", "f", "", "the CG's resources.yaml, as the NR1 toolchain wrote it")
	cmd.Flags().StringSliceVarP(&containers, "container", "c", []string{manifest.DefaultContainer}, "the container given the resources (dra: each container using the claim; repeat or comma-separate)")
	cmd.Flags().StringVar(&mode, "mode", string(manifest.DevicePlugin), "how the nodes offer the NR1, as the agent's mode: devicePlugin or dra")
	completeInject(cmd)
	return cmd
}

func readResources(path string) (nr1.Amounts, error) {
	f, err := os.Open(path)
	if err != nil {
		return nr1.Amounts{}, fmt.Errorf("resources: %w", err)
	}
	defer f.Close()
	a, err := nr1.ParseResourcesYAML(f)
	if err != nil {
		return nr1.Amounts{}, fmt.Errorf("%s: %w", path, err)
	}
	return a, nil
}

func open(path string, stdin io.Reader) (io.Reader, func(), error) {
	if path == "-" {
		return stdin, func() {}, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("pod spec: %w", err)
	}
	return f, func() { _ = f.Close() }, nil
}
