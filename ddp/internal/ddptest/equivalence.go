package ddptest

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/ddp/dist"
	"github.com/xladdp/xladdp/xla"
)

func init() { Scenarios["equivalence"] = equivalenceScenario }

// EquivalenceSteps is how many steps the equivalence scenario trains
// unless $XLADDP_TEST_STEPS says.
const EquivalenceSteps = 20

// equivalenceScenario trains $XLADDP_TEST_MODEL on this rank's
// $XLADDP_TEST_DEVICES local replicas, each with its share of the global
// batch (in $XLADDP_TEST_MICRO micro-batches) and its own seed, and
// reports local replica 0's parameters and a hash of every replica's.
func equivalenceScenario(rep *Report) {
	ctx := context.Background()
	q := &equivalence{kind: os.Getenv("XLADDP_TEST_MODEL")}
	q.devices, _ = strconv.Atoi(os.Getenv("XLADDP_TEST_DEVICES"))
	q.micro, _ = strconv.Atoi(os.Getenv("XLADDP_TEST_MICRO"))
	q.opts, q.compiled, q.sharded = wrapFromEnv()
	e, done, err := JoinJob(ctx, q.devices)
	if err != nil {
		rep.Error = err.Error()
		return
	}
	defer done()
	q.steps = EquivalenceSteps
	if s, err := strconv.Atoi(os.Getenv("XLADDP_TEST_STEPS")); err == nil {
		q.steps = s
	}
	q.params = make([][][]float32, q.devices)
	q.syncs = make([]int, q.devices)
	q.losses = make([][]float32, q.devices)
	collectivesBefore := dist.Current().Collectives()
	writtenBefore := bytesWritten()
	xla.ResetMetrics()
	if err := e.RunReplicas(ctx, q.devices, q.train); err != nil {
		rep.Error = err.Error()
		return
	}
	q.report(rep, collectivesBefore, writtenBefore)
}

// equivalence is the equivalence scenario's setting and what each local
// replica trained.
type equivalence struct {
	kind                  string
	devices, micro, steps int
	opts                  []ddp.WrapOption
	compiled, sharded     bool
	params                [][][]float32
	syncs                 []int
	losses                [][]float32
}

// wrapFromEnv reads $XLADDP_TEST_WRAP: the wrapper's options, and whether
// the steps are compiled and the optimizer sharded.
func wrapFromEnv() (opts []ddp.WrapOption, compiled, sharded bool) {
	for _, o := range strings.Split(os.Getenv("XLADDP_TEST_WRAP"), ",") {
		switch {
		case o == "view":
			opts = append(opts, ddp.GradientAsBucketView())
		case o == "compiled":
			compiled = true
		case o == "zero":
			sharded = true
		case strings.HasPrefix(o, "bucket="):
			mb, _ := strconv.ParseFloat(strings.TrimPrefix(o, "bucket="), 64)
			opts = append(opts, ddp.BucketCapMB(mb))
		}
	}
	return opts, compiled, sharded
}

// train trains local replica r on its share of the global batch.
func (q *equivalence) train(ctx context.Context, r xla.Replica) error {
	replica, replicas := dist.Current().Rank()*q.devices+r.Index(), dist.Current().WorldSize()*q.devices
	rows := GlobalRows / replicas
	var err error
	run := Run{
		Kind: q.kind, Seed: 100 + uint64(replica), Steps: q.steps,
		Shards: Split(replica*rows, (replica+1)*rows, q.micro), Wrap: true, Opts: q.opts, Compiled: q.compiled,
		Mark: func() error { return r.MarkStep(ctx) }, Syncs: &q.syncs[r.Index()],
		Optimizer: os.Getenv("XLADDP_TEST_OPTIM"), Zero: q.sharded,
	}
	if os.Getenv("XLADDP_TEST_LOSSES") != "" {
		// Every replica keeps its losses (they are outputs of the
		// programs every replica must trace alike); replica 0's are
		// reported.
		run.Losses = &q.losses[r.Index()]
	}
	q.params[r.Index()], err = TrainModel(ctx, r.Device(), run)
	return err
}

// report fills rep with local replica 0's parameters and losses, the
// counters since the readings before training, and every replica's hash.
func (q *equivalence) report(rep *Report, collectivesBefore uint64, writtenBefore int64) {
	rep.Params = q.params[0]
	rep.Losses = q.losses[0]
	rep.BytesToHost = xla.GetMetrics().BytesToHost
	rep.Counters = map[string]int64{"gradient syncs": int64(q.syncs[0]),
		"collectives": int64(dist.Current().Collectives() - collectivesBefore), "in-graph all-reduces": xla.GetMetrics().AllReduces,
		"bytes written": bytesWritten() - writtenBefore}
	rep.Hashes["step traces"] = strconv.FormatInt(xla.GetMetrics().StepTraces, 10)
	rep.SharedMemoryAllReduces = dist.Current().SharedMemoryAllReduces()
	for i, p := range q.params {
		rep.Hashes[fmt.Sprintf("replica %d", dist.Current().Rank()*q.devices+i)] = HashParams(p)
	}
}

// HashParams is a digest of a model's parameter values.
func HashParams(params [][]float32) string {
	h := sha256.New()
	for _, p := range params {
		for _, v := range p {
			_ = binary.Write(h, binary.LittleEndian, v)
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// bytesWritten is what this process has written so far (wchar of
// /proc/self/io: sockets, pipes and files), -1 where it cannot be read.
// Over loopback TCP with shared memory off it is the bytes the process
// put on the wire, beside its few lines of output.
func bytesWritten() int64 {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "wchar: "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err == nil {
				return n
			}
		}
	}
	return -1
}
