package ddp_test

import (
	"context"
	"os"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/ddp/dist"
	"github.com/xladdp/xladdp/ddp/internal/ddptest"
	"github.com/xladdp/xladdp/ddp/internal/exchange"
)

func init() { ddptest.Scenarios["gather-lie"] = gatherLieScenario }

// gatherLieScenario: rank 1 announces $XLADDP_TEST_LENGTH bytes to the
// length exchange of AllGatherBytes, which rank 0 runs honestly.
func gatherLieScenario(rep *ddptest.Report) {
	ctx := context.Background()
	if err := dist.Init(ctx, ddptest.WorkerOptions()); err != nil {
		rep.Error = err.Error()
		return
	}
	defer func() { _ = dist.Destroy() }()
	g := dist.Default()
	if g.Rank() == 1 {
		n, _ := strconv.ParseInt(os.Getenv("XLADDP_TEST_LENGTH"), 10, 64)
		lengths := make([]int64, g.WorldSize())
		rep.Errors = []string{ddptest.ErrorText(g.AllGather(ctx, dist.Int64s(lengths), dist.Int64s([]int64{n})))}
		return
	}
	_, err := exchange.AllGatherBytes(ctx, g, []byte("honest"))
	rep.Errors = []string{ddptest.ErrorText(err)}
}

// TestAllGatherBytesRefusesALyingLength: a rank that announces a length
// past exchange.MaxGatherBytes (or a negative one) is refused by the
// others before they allocate it, naming the rank.
func TestAllGatherBytesRefusesALyingLength(t *testing.T) {
	for _, n := range []int64{1 << 40, exchange.MaxGatherBytes + 1, -8} {
		t.Run(strconv.FormatInt(n, 10), func(t *testing.T) {
			cmds, outs := ddptest.Launch(t, "gather-lie", 2, "XLADDP_TEST_TIMEOUT=20s", "XLADDP_TEST_LENGTH="+strconv.FormatInt(n, 10))
			reps := ddptest.WaitReports(t, cmds, outs)
			require.Empty(t, reps[0].Error)
			require.Len(t, reps[0].Errors, 1)
			assert.Contains(t, reps[0].Errors[0], "rank 1 announced "+strconv.FormatInt(n, 10)+" bytes to gather")
		})
	}
}
