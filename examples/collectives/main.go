// Command collectives is the MPI basics demo on xladdp's process group:
// a point-to-point send from rank 0 to rank 1, a broadcast from rank 0,
// and gather → average on rank 0 → broadcast back. Run it under a
// launcher, one process per rank:
//
//	ddprun --nproc_per_node=4 collectives
//	mpirun --allow-run-as-root --oversubscribe -np 4 collectives
//	mpirun --allow-run-as-root --oversubscribe -np 4 collectives --backend mpi  # built with -tags mpi
package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/pflag"

	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/ddp/dist"
	"github.com/xladdp/xladdp/examples/internal/cmdline"
)

func main() { cmdline.Main("collectives", run) }

func run(ctx context.Context, args []string, out io.Writer) (err error) {
	o, err := parseOptions(args, out)
	if err != nil {
		return err
	}
	if err := dist.Init(ctx, o); err != nil {
		return err
	}
	defer func() { err = errors.Join(err, dist.Destroy()) }()
	g := dist.Current()
	if err := pointToPoint(ctx, g, out); err != nil {
		return err
	}
	if err := broadcast(ctx, g, out); err != nil {
		return err
	}
	return gatherAverage(ctx, g, out)
}

// parseOptions reads the process group's options from the flags.
func parseOptions(args []string, out io.Writer) (dist.Options, error) {
	fs := pflag.NewFlagSet("collectives", pflag.ContinueOnError)
	fs.SetOutput(out)
	initMethod := fs.String("init-method", "env://", "how a rank joins the job: env://, tcp://HOST:PORT or file:///shared/file")
	var transport string
	ddp.TransportFlag(fs, &transport)
	if err := fs.Parse(args); err != nil {
		return dist.Options{}, err
	}
	o := dist.NewOptions()
	o.InitMethod = *initMethod
	if transport != "" {
		o.Transport = transport
	}
	return o, nil
}

// pointToPoint has rank 0 send one value to rank 1.
func pointToPoint(ctx context.Context, g *dist.ProcessGroup, out io.Writer) error {
	rank, size := g.Rank(), g.WorldSize()
	if size <= 1 || rank >= 2 {
		return nil
	}
	v := []float32{0}
	if rank == 0 {
		v[0] = 1
		if err := g.Send(ctx, dist.Float32s(v), 1, 0); err != nil {
			return err
		}
		fmt.Fprintf(out, "Rank 0 sent %v to rank 1\n", v)
	} else {
		if err := g.Recv(ctx, dist.Float32s(v), 0, 0); err != nil {
			return err
		}
		fmt.Fprintf(out, "Rank 1 has data %v\n", v)
	}
	return nil
}

// broadcast leaves every rank with rank 0's value.
func broadcast(ctx context.Context, g *dist.ProcessGroup, out io.Writer) error {
	rank := g.Rank()
	v := []float32{float32(rank)}
	if rank == 0 {
		v[0] = 42
	}
	if err := g.Broadcast(ctx, dist.Float32s(v), 0); err != nil {
		return err
	}
	fmt.Fprintf(out, "Rank %d has %v after the broadcast from rank 0\n", rank, v)
	return nil
}

// gatherAverage gathers every rank's value on rank 0, averages them there
// and sends the average back.
func gatherAverage(ctx context.Context, g *dist.ProcessGroup, out io.Writer) error {
	rank, size := g.Rank(), g.WorldSize()
	mine := []float32{float32(rank + 1)}
	var gathered []float32
	if rank == 0 {
		gathered = make([]float32, size)
	}
	if err := g.Gather(ctx, dist.Float32s(gathered), dist.Float32s(mine), 0); err != nil {
		return err
	}
	avg := []float32{0}
	if rank == 0 {
		for _, x := range gathered {
			avg[0] += x
		}
		avg[0] /= float32(size)
		fmt.Fprintf(out, "Rank 0 gathered %v, average %g\n", gathered, avg[0])
	}
	if err := g.Broadcast(ctx, dist.Float32s(avg), 0); err != nil {
		return err
	}
	fmt.Fprintf(out, "Rank %d received the average %g\n", rank, avg[0])
	return nil
}
