// Command xladevices prints the PJRT target, plugin and devices xladdp sees.
//
//	go run ./cmd/xladevices --cpu-devices 4
//	go run ./cmd/xladevices --device cuda
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/pflag"

	"github.com/xladdp/xladdp/backend"
	"github.com/xladdp/xladdp/internal/cli"
	_ "github.com/xladdp/xladdp/targets" // every target, the default set
)

func main() {
	cli.Exit("xladevices", run(os.Args[1:], os.Stdout))
}

func run(args []string, out io.Writer) error {
	flags := pflag.NewFlagSet("xladevices", pflag.ContinueOnError)
	device := flags.String("device", "", "target: cpu, cuda (gpu), neuron, or another registered one (default $XLADDP_DEVICE, $PJRT_DEVICE, else cpu)")
	cpuDevices := flags.Int("cpu-devices", 0, "number of virtual CPU devices (default $XLADDP_CPU_DEVICES, $CPU_NUM_DEVICES, else 1)")
	plugin := flags.String("plugin", "", "PJRT plugin .so to load (default $XLADDP_PJRT_PLUGIN, else search)")
	timeout := flags.Duration("timeout", 2*time.Minute, "how long to wait for the plugin to load")
	if err := flags.Parse(args); err != nil {
		return err
	}
	if flags.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q: xladevices takes only flags (see --help)", flags.Args())
	}
	if *timeout < time.Millisecond {
		return fmt.Errorf("--timeout=%v: give a positive duration of at least 1ms, e.g. 2m", *timeout)
	}
	if flags.Changed("cpu-devices") && *cpuDevices < 1 {
		return fmt.Errorf("--cpu-devices=%d: give a count from 1 to %d", *cpuDevices, backend.MaxCPUDevices)
	}
	opts := backend.Options{PluginPath: *plugin, CPUDevices: *cpuDevices}
	if *device != "" {
		t, err := backend.ParseTarget(*device)
		if err != nil {
			return fmt.Errorf("--device: %w", err)
		}
		opts.Target = t
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	target, err := backend.ResolveTarget(opts.Target)
	if err != nil {
		return err
	}
	// What would make the plugin fail, each with its fix.
	for _, p := range backend.Preflight(target) {
		fmt.Fprintf(out, "preflight:      %s\n", p)
	}
	b, err := backend.Open(ctx, opts)
	if err != nil {
		return err
	}
	defer b.Close()

	major, minor := b.APIVersion()
	fmt.Fprintf(out, "target:         %s\n", b.Target())
	fmt.Fprintf(out, "plugin:         %s (found by %s)\n", b.PluginPath(), b.PluginSource())
	fmt.Fprintf(out, "platform:       %s %s\n", b.Platform(), b.PlatformVersion())
	fmt.Fprintf(out, "PJRT C API:     v%d.%d\n", major, minor)
	fmt.Fprintf(out, "convolutions:   %s\n", b.Kernels())
	if b.Deterministic() {
		fmt.Fprintf(out, "deterministic:  on (XLA_FLAGS=%s)\n", os.Getenv("XLA_FLAGS"))
	} else {
		fmt.Fprintf(out, "deterministic:  off\n")
	}
	fmt.Fprintf(out, "process index:  %d\n", b.ProcessIndex())
	fmt.Fprintf(out, "devices:        %d\n", b.NumDevices())
	for _, d := range b.Devices() {
		fmt.Fprintf(out, "  [%d] id=%d kind=%s process=%d (%s)\n", d.Num, d.ID, d.Kind, d.ProcessIndex, d.Description)
	}
	return nil
}
