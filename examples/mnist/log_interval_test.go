package main

import (
	"bytes"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/examples/internal/exampletest"
)

// TestLogIntervalOffATerminal: --log-interval 1 with the output not a
// terminal prints a progress line for every step, each counting the
// samples since the last (the loss was read every 10 steps, so lines came
// every 10 whatever the flag said).
func TestLogIntervalOffATerminal(t *testing.T) {
	exampletest.CleanEnv(t)
	var out bytes.Buffer
	_, err := run(t.Context(), []string{"--spawn", "--max-steps", "4", "--batch-size", "16", "--test-batch-size", "100", "--log-interval", "1",
		"--data", exampletest.MNISTSubset(t, 480, 100)}, &out)
	require.NoError(t, err, out.String())
	steps := regexp.MustCompile(`epoch 1/1 step (\d+)/4 loss`).FindAllStringSubmatch(out.String(), -1)
	var got []string
	for _, s := range steps {
		got = append(got, s[1])
	}
	assert.Equal(t, []string{"1", "2", "3", "4"}, got, out.String())
}
