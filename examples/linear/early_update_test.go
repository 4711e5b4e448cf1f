//go:build xladdp_early_update

package main

import (
	"fmt"
	"testing"

	"github.com/xladdp/xladdp/examples/internal/exampletest"
)

// TestLongEarlyUpdateIsCaught shows that TestNoStepLostWithANode can
// fail: in the xladdp_early_update build a replica whose gradient
// exchange lost a peer applies the update with the gradients it holds,
// before every rank combined them, and counts the step done. Over a few
// trials of a node lost at a random moment, the weights differ from the
// uninterrupted job's (make test-long builds and runs it).
func TestLongEarlyUpdateIsCaught(t *testing.T) {
	exampletest.CleanEnv(t)
	args := []string{"--epochs", "300", "--deterministic", "--checkpoint-every", "1000"}
	want := exampletest.WeightsDigest(t, exampletest.Ranks(3).Run(t, "linear", args...))
	for trial := range 5 {
		var got string
		t.Run(fmt.Sprintf("trial %d", trial+1), func(t *testing.T) {
			out := exampletest.LoseANode(t, "linear", args, 3, exampletest.Marks("epoch %d: ", 40, 80, 120, 160, 200))
			got = exampletest.WeightsDigest(t, out)
		})
		if got != "" && got != want {
			t.Logf("trial %d: the early update trained other weights (%s, not %s): the test catches it", trial+1, got, want)
			return
		}
	}
	t.Fatalf("5 jobs that applied an update before every rank combined its gradients all trained the uninterrupted weights %s", want)
}
