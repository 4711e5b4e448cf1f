package main

import (
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
		{args: []string{"--mode", "eager"}, err: "--mode"},
		{args: []string{"--mode", ""}, err: "--mode"},
		{args: []string{"--mode", "compiled", "--steps-per-markstep", "10", "--steps", "10", "--warmup", "0"}, err: "one step per call"},
		{args: []string{"--model", "resnet50"}, err: "--model"},
		{args: []string{"--steps", "0"}, err: ">= 1"},
		{args: []string{"--steps", "5", "--steps-per-markstep", "2"}, err: "multiples"},
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
