package ddp_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/ddp/dist"
	"github.com/xladdp/xladdp/ddp/internal/ddptest"
)

// TestSameBitsInEveryLayout: 3 replicas train to the same bits whether
// they are local (in-graph all-reduce), processes on one host (shared
// memory) or processes whose all-reduce crosses TCP (the chunk fold), for
// the toy and for 2 MiB of gradients (past the direct all-reduce): every
// path divides by the replica count first and adds in rank order. At 3
// (not a power of two) the division rounds, so a path that divided after
// the sum, or let the compiler fold the division into the learning rate,
// would differ.
func TestSameBitsInEveryLayout(t *testing.T) {
	for _, kind := range []string{"toy", "wide"} {
		t.Run(kind, func(t *testing.T) {
			hashes := map[string]string{}
			for _, layout := range []struct {
				processes, devices int
				env                string
			}{{1, 3, ""}, {3, 1, dist.EnvShmMiB + "=16"}, {3, 1, dist.EnvShmMiB + "=0"}} {
				name := fmt.Sprintf("%dx%d %s", layout.processes, layout.devices, layout.env)
				cmds, outs := ddptest.Launch(t, "equivalence", layout.processes, "XLADDP_TEST_TIMEOUT=60s", "XLADDP_TEST_MODEL="+kind,
					"XLADDP_TEST_OPTIM=sgd", fmt.Sprintf("XLADDP_TEST_DEVICES=%d", layout.devices), "XLADDP_TEST_MICRO=1", layout.env)
				reps := ddptest.WaitReports(t, cmds, outs)
				require.Empty(t, reps[0].Error, name)
				delete(reps[0].Hashes, "step traces")
				for _, h := range reps[0].Hashes {
					hashes[name] = h
				}
			}
			require.Len(t, hashes, 3)
			for name, h := range hashes {
				assert.Equal(t, hashes["1x3 "], h, "%s trained to other weights than 3 local replicas", name)
			}
		})
	}
}
