package xla

import (
	"context"
	"fmt"
	"testing"
)

// BenchmarkToyStep measures one training step of the Neuron tutorial's toy
// model on 2 CPU replicas with in-graph gradient all-reduce, tracing
// stepsPerMarkStep steps before each MarkStep. ns/op is per training step.
func BenchmarkToyStep(b *testing.B) {
	for _, stepsPerMarkStep := range []int{1, 10} {
		b.Run(fmt.Sprintf("steps_per_markstep=%d", stepsPerMarkStep), func(b *testing.B) {
			benchToy(b, 2, stepsPerMarkStep)
		})
	}
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
		b.ReportMetric(float64(m.ExecuteTime.Nanoseconds())/float64(b.N), "exec-ns/step")
	}
}
