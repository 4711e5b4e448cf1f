// Command devicecollectives opens N local devices, gives device d the vector
// [d+1, 10(d+1), 100(d+1)], all-reduces it in-graph with SUM and MAX as one
// compiled SPMD program, and prints what every device received next to the
// expected values. It exits non-zero if any device got a wrong answer.
//
//	go run ./examples/devicecollectives --devices 4
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/distributed"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"
	"github.com/spf13/pflag"

	"github.com/xladdp/xladdp/backend"
	"github.com/xladdp/xladdp/internal/cli"
	_ "github.com/xladdp/xladdp/neuron" // --device neuron
)

func main() {
	cli.Exit("devicecollectives", run(os.Args[1:], os.Stdout))
}

func run(args []string, out io.Writer) (err error) {
	// GoMLX reports graph errors by panicking; report them as errors.
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("building or running the graph: %v", p)
		}
	}()
	numDevices, target, err := parseFlags(args)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b, err := backend.Open(ctx, backend.Options{Target: target, Replicas: numDevices})
	if err != nil {
		return err
	}
	defer b.Close()

	inputs, wantSum, wantMax := replicaInputs(numDevices)
	outputs, err := allReduce(b, numDevices, inputs)
	if err != nil {
		return err
	}

	major, minor := b.APIVersion()
	fmt.Fprintf(out, "%s plugin %s (PJRT C API v%d.%d), %d devices, one SPMD program\n",
		b.Target(), b.PluginPath(), major, minor, b.NumDevices())
	fmt.Fprintf(out, "expected: sum=%v max=%v\n", wantSum, wantMax)
	wrong := 0
	for d := range numDevices {
		sum := outputs[2*d].Value().([]float32)
		maxv := outputs[2*d+1].Value().([]float32)
		status := "ok"
		if !slices.Equal(sum, wantSum) || !slices.Equal(maxv, wantMax) {
			status = "WRONG"
			wrong++
		}
		fmt.Fprintf(out, "device %d: input=%v sum=%v max=%v %s\n", d, inputs[d], sum, maxv, status)
	}
	if wrong > 0 {
		return fmt.Errorf("%d of %d devices got a wrong all-reduce result", wrong, numDevices)
	}
	fmt.Fprintln(out, "all devices agree: in-graph all-reduce works")
	return nil
}

// parseFlags reads the device count and target.
func parseFlags(args []string) (numDevices int, target backend.Target, err error) {
	flags := pflag.NewFlagSet("devicecollectives", pflag.ContinueOnError)
	n := flags.Int("devices", 4, "number of local devices to all-reduce across")
	device := flags.String("device", "cpu", "target: cpu, cuda or neuron")
	if err := flags.Parse(args); err != nil {
		return 0, "", err
	}
	if *n < 1 {
		return 0, "", fmt.Errorf("--devices=%d: give at least 1", *n)
	}
	if target, err = backend.ParseTarget(*device); err != nil {
		return 0, "", fmt.Errorf("--device: %w", err)
	}
	return *n, target, nil
}

// width is the length of each device's vector.
const width = 3

// replicaInputs is each device's vector, and their sum and maximum.
func replicaInputs(numDevices int) (inputs []any, wantSum, wantMax []float32) {
	inputs = make([]any, numDevices)
	wantSum = make([]float32, width)
	wantMax = make([]float32, width)
	for d := range numDevices {
		v := []float32{float32(d + 1), float32(10 * (d + 1)), float32(100 * (d + 1))}
		inputs[d] = v
		for i := range v {
			wantSum[i] += v[i]
			wantMax[i] = max(wantMax[i], v[i])
		}
	}
	return inputs, wantSum, wantMax
}

// allReduce compiles one SPMD program that all-reduces its input with SUM
// and with MAX, and runs it on inputs: every device's two results, in
// device order.
func allReduce(b *backend.Backend, numDevices int, inputs []any) ([]*tensors.Tensor, error) {
	mesh, err := distributed.NewDeviceMesh([]int{numDevices}, []string{"replica"})
	if err != nil {
		return nil, err
	}
	g := graph.NewGraph(b.GoMLX(), "devicecollectives")
	if err := g.SetSPMD(mesh); err != nil {
		return nil, err
	}
	// GoMLX only assigns devices by default when there are several; an SPMD
	// program with a collective is not portable, so assign even one.
	if err := g.SetDeviceAssignment(deviceNums(numDevices)); err != nil {
		return nil, err
	}
	x := graph.Parameter(g, "x", shapes.Make(dtypes.Float32, width))
	dist := g.Distributed()
	if err := g.Compile(dist.AllReduceOne(x, compute.ReduceOpSum), dist.AllReduceOne(x, compute.ReduceOpMax)); err != nil {
		return nil, err
	}
	return g.Run(inputs...), nil
}

func deviceNums(n int) []compute.DeviceNum {
	nums := make([]compute.DeviceNum, n)
	for i := range nums {
		nums[i] = compute.DeviceNum(i)
	}
	return nums
}
