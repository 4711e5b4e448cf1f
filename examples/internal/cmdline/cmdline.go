// Package cmdline is what the examples' command lines share: a flag set
// with ddp's launch flags (--spawn, --init-method, --cpu-devices,
// --device) in the style of xladdp's other commands, and a main that
// stops on SIGINT/SIGTERM and exits like them.
package cmdline

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/internal/cli"
)

// FlagSet returns the command's flag set, writing usage to out, with the
// launch flags on it; their values are in the options after Parse.
func FlagSet(name string, out io.Writer) (*pflag.FlagSet, *ddp.LaunchOptions) {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetOutput(out)
	launchFlags := flag.NewFlagSet("launch", flag.ContinueOnError)
	launch := ddp.LaunchFlags(launchFlags)
	fs.AddGoFlagSet(launchFlags)
	return fs, launch
}

// Parse parses args; the examples take flags only.
func Parse(fs *pflag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (flags only)", fs.Arg(0))
	}
	return nil
}

// Main runs run with the command line until it returns or a signal stops
// it, then exits as cli.Exit does.
func Main(name string, run func(ctx context.Context, args []string, out io.Writer) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	cli.Exit(name, err)
}
