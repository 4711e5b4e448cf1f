package launch_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xladdp/xladdp/ddp/checkpoint"
	"github.com/xladdp/xladdp/ddp/launch"
	"github.com/xladdp/xladdp/internal/testtmp"

	"github.com/xladdp/xladdp/backend"
	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/ddp/dist"
	"github.com/xladdp/xladdp/neuron"
	_ "github.com/xladdp/xladdp/neuron" // the neuron target's bootstrap
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/optim"
)

// workerEnvName makes the test binary a worker running a scenario.
const workerEnvName = launch.WorkerEnvName

func TestMain(m *testing.M) {
	if s := os.Getenv(workerEnvName); s != "" {
		os.Exit(runScenario(s))
	}
	os.Exit(testtmp.Run(m))
}

// runScenario is one worker; its exit status is what the agent sees.
func runScenario(name string) int {
	if fault, ok := isFault(name); ok {
		return faultWorker(fault)
	}
	if code, ok := regroupScenario(name); ok {
		return code
	}
	rank, _ := strconv.Atoi(os.Getenv("RANK"))
	switch name {
	case "env":
		keys := []string{"RANK", "LOCAL_RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
			"ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
			"TORCHELASTIC_RUN_ID", "OMP_NUM_THREADS", "XLADDP_BIND_CPUS", "XLADDP_TIMEOUT"}
		env := map[string]string{}
		for _, k := range keys {
			env[k] = os.Getenv(k)
		}
		out, _ := json.Marshal(env)
		fmt.Println("ENV " + string(out))
		return 0
	case "fail-once-slow":
		// The job's first round fails after a while (a late node arrives
		// meanwhile); the next runs and says its world size.
		if os.Getenv("TORCHELASTIC_RESTART_COUNT") == "0" {
			time.Sleep(2 * time.Second)
			return 3
		}
		fmt.Printf("world %s\n", os.Getenv("WORLD_SIZE"))
		return 0
	case "checkpoint-on-term":
		// A worker with a checkpointer: the first round runs until
		// SIGTERM, commits and exits 75; a later one says its world.
		fmt.Printf("round %s: world %s\n", os.Getenv("TORCHELASTIC_RESTART_COUNT"), os.Getenv("WORLD_SIZE"))
		if os.Getenv("TORCHELASTIC_RESTART_COUNT") != "0" {
			return 0
		}
		term := make(chan os.Signal, 1)
		signal.Notify(term, syscall.SIGTERM)
		select {
		case <-term:
			fmt.Println("checkpointed")
			return 75
		case <-time.After(20 * time.Second):
			return 0
		}
	case "nogroup-sleep":
		// A program with no process group, so no flight record.
		nap := 1500 * time.Millisecond
		if d, err := time.ParseDuration(os.Getenv("XLADDP_TEST_SLEEP")); err == nil {
			nap = d
		}
		time.Sleep(nap)
		fmt.Println("awake")
		return 0
	case "stderr":
		fmt.Fprintln(os.Stderr, "to stderr")
		fmt.Println("to stdout")
		return 0
	case "train":
		return train(rank)
	case "preemptible":
		return preemptible()
	case "neuron-env":
		return neuronEnv()
	}
	// The rest meet in a group first, then misbehave on rank 1.
	ctx := context.Background()
	o := dist.NewOptions()
	o.Timeout = 20 * time.Second
	if d, err := time.ParseDuration(os.Getenv("XLADDP_TEST_TIMEOUT")); err == nil {
		o.Timeout = d
	}
	if err := dist.Init(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer dist.Destroy()
	rank = dist.Rank() // under mpirun, from Open MPI's variables
	sum := []float32{float32(rank)}
	if err := dist.Default().AllReduce(ctx, dist.Float32s(sum), dist.Sum); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	fmt.Printf("sum %v\n", sum[0])
	if rank == 1 {
		switch name {
		case "fail":
			fmt.Println("rank 1 gives up")
			return 3
		case "orphan", "orphan-setsid":
			// A child (a log shipper, a data daemon) keeps this rank's
			// stdout and stderr open after it fails; with setsid it
			// also leaves the rank's process group.
			child := exec.Command("sleep", "40")
			child.Stdout, child.Stderr = os.Stdout, os.Stderr
			child.SysProcAttr = &syscall.SysProcAttr{Setsid: name == "orphan-setsid"}
			if err := child.Start(); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 2
			}
			fmt.Println("rank 1 gives up")
			return 3
		case "kill":
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		case "stop":
			// The stop takes every thread a moment: block meanwhile, so
			// this rank never reaches the next collective.
			_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
			select {}
		}
	}
	if name == "ok" {
		return 0
	}
	if name == "hang" {
		select {} // until stopped
	}
	// Everyone else waits in a collective rank 1 never joins.
	if err := dist.Default().AllReduce(ctx, dist.Float32s(sum), dist.Sum); err != nil {
		fmt.Fprintln(os.Stderr, "rank", rank, "collective failed:", err)
		return 4
	}
	return 0
}

// train trains the toy 20 steps with a checkpoint every 5 in
// $XLADDP_TEST_DIR, resuming from one; on its first attempt rank 1 kills
// itself at step 12 when $XLADDP_TEST_KILL is set. Rank 0 prints the
// final parameters.
func train(rank int) int {
	ctx := context.Background()
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "train:", err); return 2 }
	if err := dist.Init(ctx, dist.NewOptions()); err != nil {
		return fail(err)
	}
	defer dist.Destroy()
	d, closeEngine, err := cpuDevice(ctx)
	if err != nil {
		return fail(err)
	}
	defer closeEngine()
	rng := nn.NewRand(uint64(7 + rank))
	l1, err1 := nn.NewLinear(d, rng, 10, 10, true)
	l2, err2 := nn.NewLinear(d, rng, 10, 5, true)
	if err1 != nil || err2 != nil {
		return fail(fmt.Errorf("%v %v", err1, err2))
	}
	model, err := ddp.Wrap(ctx, nn.NewSequential(l1, nn.ReLU{}, l2))
	if err != nil {
		return fail(err)
	}
	opt, err := optim.NewSGD(nn.Parameters(model), optim.SGDConfig{LR: 0.05, Momentum: 0.9})
	if err != nil {
		return fail(err)
	}
	path := filepath.Join(os.Getenv("XLADDP_TEST_DIR"), "ckpt.safetensors")
	c := optim.Checkpoint{Model: model, Optimizer: opt}
	if _, err := os.Stat(path); err == nil {
		if err := checkpoint.Load(ctx, path, &c); err != nil {
			return fail(err)
		}
		fmt.Printf("resumed at %d\n", c.Step)
	}
	xs, ys := make([]float32, 4*10), make([]float32, 4*5)
	for i := range xs {
		xs[i] = float32((i*7+rank*3)%11) / 11
	}
	for i := range ys {
		ys[i] = float32((i*5+rank)%7) / 7
	}
	x, _ := xla.FromSlice(d, xs, 4, 10)
	y, _ := xla.FromSlice(d, ys, 4, 5)
	start, startStep := time.Now(), c.Step
	for step := c.Step; step < 20; step++ {
		if step == 12 && rank == 1 && os.Getenv("XLADDP_TEST_KILL") != "" && os.Getenv("TORCHELASTIC_RESTART_COUNT") == "0" {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		opt.ZeroGrad()
		if err := optim.BackwardStep(ctx, nn.MSELoss(model.Forward(x), y, nn.ReductionMean), opt); err != nil {
			return fail(err)
		}
		if (step+1)%5 == 0 {
			if err := checkpoint.Save(ctx, path, optim.Checkpoint{Model: model, Optimizer: opt, Step: step + 1}); err != nil {
				return fail(err)
			}
		}
	}
	m := xla.GetMetrics()
	fmt.Printf("METRICS compilations=%d persistent=%d executions=%d skipped=%d\n",
		m.Compilations, m.PersistentCacheHits, m.Executions, m.SkippedExecutions)
	if rank == 0 {
		if err := printParams(ctx, model); err != nil {
			return fail(err)
		}
		fmt.Printf("STEPMS %.3f\n", float64(time.Since(start).Microseconds())/1000/float64(max(20-startStep, 1)))
	}
	return 0
}

// neuronKeys are the variables torch-xla sets for a Neuron worker.
var neuronKeys = []string{"NEURON_RT_ROOT_COMM_ID", "NEURON_PJRT_PROCESS_INDEX", "NEURON_PJRT_PROCESSES_NUM_DEVICES",
	"NEURON_PJRT_WORLD_SIZE", "PJRT_LOCAL_PROCESS_COUNT", "PJRT_LOCAL_PROCESS_RANK", "NEURON_RT_VISIBLE_CORES",
	"FI_PROVIDER", "FI_EFA_USE_DEVICE_RDMA", "FI_EFA_FORK_SAFE"}

// neuronEnv opens the neuron target (the stand-in plugin) as a worker
// and prints the Neuron variables the bootstrap left in its environment.
func neuronEnv() int {
	b, err := backend.Open(context.Background(), backend.Options{Target: neuron.Target})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer b.Close()
	env := map[string]string{"RANK": os.Getenv("RANK")}
	for _, k := range neuronKeys {
		env[k] = os.Getenv(k)
	}
	out, _ := json.Marshal(env)
	fmt.Println("NEURONENV " + string(out))
	return 0
}

// cpuDevice opens a one-device CPU engine for a worker; closeEngine closes it.
func cpuDevice(ctx context.Context) (d *xla.Device, closeEngine func(), err error) {
	b, err := backend.Open(ctx, backend.Options{Target: backend.CPU, CPUDevices: 1})
	if err != nil {
		return nil, nil, err
	}
	e := xla.NewEngine(b)
	return e.Device(0), func() { _ = e.Close() }, nil
}

// printParams prints the model's parameters on one PARAMS line, which
// the tests compare between runs.
func printParams(ctx context.Context, model nn.Module) error {
	var parts []string
	for _, p := range nn.Parameters(model) {
		v, err := p.Float32s(ctx)
		if err != nil {
			return err
		}
		parts = append(parts, fmt.Sprint(v))
	}
	fmt.Println("PARAMS " + strings.Join(parts, " "))
	return nil
}
