package xla

import (
	"context"
	"fmt"
	"runtime"
	"testing"
)

// BenchmarkToyStep measures one training step of the Neuron tutorial's toy
// model on 2 CPU replicas with in-graph gradient all-reduce, tracing
// stepsPerMarkStep steps before each MarkStep. ns/op is per training step.
func BenchmarkToyStep(b *testing.B) {
	for _, replicas := range []int{1, 2} {
		for _, stepsPerMarkStep := range []int{1, 10} {
			b.Run(fmt.Sprintf("replicas=%d/steps_per_markstep=%d", replicas, stepsPerMarkStep), func(b *testing.B) {
				benchToy(b, replicas, stepsPerMarkStep)
			})
		}
	}
}

// BenchmarkToyStepCompiled is BenchmarkToyStep's step as a compiled step
// (Compile), one Run per training step.
func BenchmarkToyStepCompiled(b *testing.B) {
	for _, replicas := range []int{1, 2} {
		b.Run(fmt.Sprintf("replicas=%d", replicas), func(b *testing.B) {
			eng := newEngine(b, replicas)
			initial := toyInit(7)
			ResetMetrics()
			b.ResetTimer()
			err := eng.RunReplicas(context.Background(), replicas, func(ctx context.Context, r Replica) error {
				params, x, y, err := toyReplica(r.Device(), initial, r.Index())
				if err != nil {
					return err
				}
				step := toyCompiled(params)
				for range b.N {
					if _, err := step.Run(ctx, r.Device(), x, y); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			b.ReportMetric(float64(GetMetrics().StepTraces), "traces")
		})
	}
}

// BenchmarkCompiledStepOverhead is a compiled step whose program adds 1
// to a one-element tensor in place: what a Run costs besides the work.
func BenchmarkCompiledStepOverhead(b *testing.B) {
	eng := newEngine(b, 1)
	d := eng.Device(0)
	x := mustFromSlice(b, d, []float32{1}, 1)
	step := Compile(func(...*Tensor) ([]*Tensor, error) { return nil, x.Assign(x.AddScalar(1)) })
	ctx := context.Background()
	ResetMetrics()
	b.ResetTimer()
	for range b.N {
		if _, err := step.Run(ctx, d); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(GetMetrics().ExecuteTime.Nanoseconds())/float64(b.N), "dispatch-ns/op")
}

// BenchmarkToyStepWithHeap is the 1-replica toy step while the program
// holds 250 MB of pointer-rich host data (a decoded dataset, say): a
// MarkStep that collected garbage would pay for scanning it every step.
func BenchmarkToyStepWithHeap(b *testing.B) {
	heap := pointerRichHeap(250 << 20)
	benchToy(b, 1, 1)
	runtime.KeepAlive(heap)
}

// listNode is 64 bytes with a pointer the GC must follow.
type listNode struct {
	next    *listNode
	payload [7]int64
}

func pointerRichHeap(bytes int) *listNode {
	var head *listNode
	for range bytes / 64 {
		head = &listNode{next: head}
	}
	return head
}

func benchToy(b *testing.B, replicas, stepsPerMarkStep int) {
	eng := newEngine(b, replicas)
	initial := toyInit(7)
	marksteps := (b.N + stepsPerMarkStep - 1) / stepsPerMarkStep
	ResetMetrics()
	b.ResetTimer()
	err := eng.RunReplicas(context.Background(), replicas, func(ctx context.Context, r Replica) error {
		params, x, y, err := toyReplica(r.Device(), initial, r.Index())
		if err != nil {
			return err
		}
		for range marksteps {
			for range stepsPerMarkStep {
				if _, err := toyStep(params, x, y); err != nil {
					return err
				}
			}
			if err := r.MarkStep(ctx); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	m := GetMetrics()
	b.ReportMetric(float64(m.Compilations), "compiles")
	if m.Executions > 0 {
		// Execution is asynchronous: ExecuteTime is the PJRT execute call.
		dispatch := float64(m.ExecuteTime.Nanoseconds()) / float64(b.N)
		b.ReportMetric(dispatch, "dispatch-ns/step")
		// Host overhead: everything but that call, per MarkStep.
		b.ReportMetric((float64(b.Elapsed().Nanoseconds())/float64(b.N)-dispatch)*float64(stepsPerMarkStep), "host-ns/markstep")
	}
	b.ReportMetric(float64(m.Collections), "gcs")
}
