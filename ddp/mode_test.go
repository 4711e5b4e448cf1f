package ddp

import (
	"io"
	"testing"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestModeFlags: ddp.Flags owns --deterministic and --micro-shard; the
// mode checks a program's batch before any device opens, and refuses a
// micro-shard given without the mode.
func TestModeFlags(t *testing.T) {
	b := Batch{Global: 64, MicroShard: 16, Seed: 1}
	for _, tc := range []struct {
		args       []string
		parseErr   string
		checkErr   string
		want       Mode
		microShard int
	}{
		{args: nil, want: Mode{}},
		{args: []string{"--deterministic"}, want: Mode{Deterministic: true}, microShard: 16},
		{args: []string{"--deterministic", "--micro-shard", "8"}, want: Mode{Deterministic: true, MicroShard: 8}, microShard: 8},
		{args: []string{"--deterministic", "--micro-shard", "7"}, want: Mode{Deterministic: true, MicroShard: 7}, microShard: 7,
			checkErr: "--deterministic with --micro-shard 7: ddp: a micro-shard of 7 samples does not divide the global batch of 64"},
		{args: []string{"--micro-shard", "8"}, want: Mode{MicroShard: 8}, microShard: 8, checkErr: "--micro-shard 8 without --deterministic"},
		{args: []string{"--deterministic", "--micro-shard", "0"}, parseErr: "want a sample count of at least 1"},
		{args: []string{"--deterministic", "--micro-shard", "x"}, parseErr: "want a sample count of at least 1"},
	} {
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		fs.SetOutput(io.Discard)
		o := Flags(fs)
		err := fs.Parse(tc.args)
		if tc.parseErr != "" {
			assert.ErrorContains(t, err, tc.parseErr, "%v", tc.args)
			continue
		}
		require.NoError(t, err, "%v", tc.args)
		assert.Equal(t, tc.want, o.Mode, "%v", tc.args)
		if tc.microShard > 0 {
			assert.Equal(t, tc.microShard, o.Mode.MicroShardFor(b))
		}
		if err := o.Mode.CheckBatch(b); tc.checkErr != "" {
			assert.ErrorContains(t, err, tc.checkErr, "%v", tc.args)
		} else {
			assert.NoError(t, err, "%v", tc.args)
		}
	}
	assert.ErrorContains(t, Mode{}.CheckBatch(Batch{}), "a global batch of 0")
	assert.ErrorContains(t, Mode{Deterministic: true}.CheckBatch(Batch{Global: 64}), "no micro-shard size")
}
