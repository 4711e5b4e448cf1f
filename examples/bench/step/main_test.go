package main

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestParse: the modes and models are checked before any backend opens,
// with an error that names the flag.
func TestParse(t *testing.T) {
	for _, c := range []struct {
		args     []string
		err      string
		compiled bool
	}{
		{args: nil},
		{args: []string{"--mode", "compiled", "--model", "resnet18"}, compiled: true},
		{args: []string{"--model", "resnet18-cifar", "--batch", "32"}},
		{args: []string{"--mode", "eager"}, err: "--mode"},
		{args: []string{"--mode", ""}, err: "--mode"},
		{args: []string{"--mode", "compiled", "--steps-per-markstep", "10", "--steps", "10", "--warmup", "0"}, compiled: true},
		{args: []string{"--mode", "compiled", "--steps-per-markstep", "10", "--steps", "15"}, err: "multiples"},
		{args: []string{"--model", "resnet50"}, err: "--model"},
		{args: []string{"--steps", "0"}, err: ">= 1"},
		{args: []string{"--steps", "5", "--steps-per-markstep", "2"}, err: "multiples"},
		{args: []string{"--batch", "-1"}, err: "--batch"},
		{args: []string{"--batch", "x"}, err: "invalid argument"},
	} {
		got, err := parse(c.args)
		if c.err != "" {
			assert.ErrorContains(t, err, c.err, "%v", c.args)
			continue
		}
		require.NoError(t, err, "%v", c.args)
		assert.Equal(t, c.compiled, got.compiled, "%v", c.args)
	}
}

// TestRunsEveryMode: the toy runs lazy and compiled, one and ten steps per
// MarkStep or Run, on one and two replicas, and reports what it ran: the
// same 50 steps each time, so the same final loss for a replica count.
func TestRunsEveryMode(t *testing.T) {
	t.Setenv("XLADDP_CACHE_DIR", "off")
	final := map[int][]float64{} // by replica count
	for _, args := range [][]string{
		{"--mode", "lazy", "--steps-per-markstep", "1"},
		{"--mode", "lazy", "--steps-per-markstep", "10"},
		{"--mode", "compiled", "--steps-per-markstep", "1"},
		{"--mode", "compiled", "--steps-per-markstep", "10"},
		{"--mode", "lazy", "--steps-per-markstep", "1", "--replicas", "2"},
		{"--mode", "compiled", "--steps-per-markstep", "10", "--replicas", "2"},
	} {
		var out bytes.Buffer
		all := append([]string{"--model", "toy", "--steps", "20", "--warmup", "10", "--samples", "2"}, args...)
		require.NoError(t, run(context.Background(), all, &out), "%v", all)
		var res Result
		require.NoError(t, json.Unmarshal(out.Bytes(), &res), "%s", out.String())
		assert.Equal(t, args[1], res.Mode)
		assert.Equal(t, map[string]int{"1": 1, "10": 10}[args[3]], res.StepsPerRun)
		assert.Len(t, res.StepMS, 2)
		assert.Greater(t, res.MedianStepMS, 0.0)
		assert.InDelta(t, 1.036950, res.InitialLoss, 1e-6)
		assert.Less(t, res.FinalLoss, res.InitialLoss, "%v did not train", args)
		final[res.Replicas] = append(final[res.Replicas], res.FinalLoss)
	}
	require.Len(t, final, 2)
	for replicas, losses := range final {
		for i, f := range losses[1:] {
			assert.InDelta(t, losses[0], f, 1e-6, "%d replicas: run %d trained differently from the first", replicas, i+1)
		}
	}
}
