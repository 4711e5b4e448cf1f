// Command ddprun is xladdp's torchrun: it starts a Go training binary once
// per worker with torchrun's environment, meets the other nodes' agents,
// and stops the whole job when a worker fails. It accepts torchrun's
// command line:
//
//	ddprun --nnodes=1 --nproc_per_node=2 --rdzv_backend=c10d --rdzv_endpoint=localhost:0 ./train --epochs 3
//	ddprun --nproc_per_node=2 --nnodes=2 --node_rank=0 --master_addr=10.0.0.1 --master_port=2020 ./train
//
// See ddprun --help and package ddp/launch.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/xladdp/xladdp/ddp/launch"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	if len(args) > 0 && args[0] == "flight" {
		return flight(args)
	}
	c, err := launch.ParseArgs(args, os.Getenv, os.Stderr)
	if errors.Is(err, pflag.ErrHelp) {
		return 0
	}
	if err == nil {
		err = launch.Detect(&c, os.Getenv)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ddprun:", err)
		return 1
	}
	if c.Doctor {
		ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
		defer cancel()
		return launch.Doctor(ctx, c, os.Environ(), os.Stdout)
	}
	if c.DryRun {
		launch.DryRun(os.Stdout, c, os.Environ())
		return 0
	}
	return runJob(c)
}

// flight is `ddprun flight DIR`: the diagnosis of the flight records.
func flight(args []string) int {
	if len(args) != 2 || args[1] == "-h" || args[1] == "--help" {
		fmt.Fprintln(os.Stderr, "usage: ddprun flight DIR   (the diagnosis of the flight records under DIR)")
		return 2
	}
	if err := launch.FlightSummary(os.Stdout, args[1]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// runJob runs the job c until it ends or a signal stops it, and returns
// its exit code.
func runJob(c launch.Config) int {
	// SIGINT and SIGTERM stop the workers (they are in their own process
	// groups, so the terminal's SIGINT reaches only ddprun).
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	go stopOnSignals(sigs, cancel)
	// SIGUSR1 asks the workers for their flight records, as a hang's
	// first aid; the job goes on.
	usr1 := make(chan os.Signal, 1)
	requests := make(chan struct{}, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	go func() {
		for range usr1 {
			select {
			case requests <- struct{}{}:
			default:
			}
		}
	}()
	c.FlightRequests = requests
	code := launch.Run(ctx, c, os.Environ(), os.Stdout, os.Stderr)
	signal.Stop(usr1)
	close(usr1)
	signal.Stop(sigs)
	close(sigs)
	return code
}

// stopOnSignals is ddprun's interrupt rule, the workers' own: the first
// signal stops the job (the workers get SIGTERM and PreemptGrace to
// commit their step); a second Ctrl-C stops them at once (they die with
// ddprun), losing the steps since the last checkpoint.
func stopOnSignals(sigs <-chan os.Signal, cancel context.CancelCauseFunc) {
	first, ok := <-sigs
	if !ok {
		return
	}
	if first == syscall.SIGINT {
		fmt.Fprintln(os.Stderr, "ddprun: interrupt: stopping the workers; those that keep checkpoints (--checkpoint-dir) "+
			"commit their step first (the same command resumes), the others stop now; interrupt again to stop them all at once")
	}
	cancel(fmt.Errorf("received %v", first))
	for s := range sigs {
		if s == syscall.SIGINT {
			fmt.Fprintln(os.Stderr, "ddprun: stopping the workers at once")
			os.Exit(130)
		}
	}
}
