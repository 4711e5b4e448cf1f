package report

import "fmt"

// Loss is a loss for a line that reports one, or says that this run
// measured none: a run resumed from a checkpoint at the end of the epoch
// or of training takes no step there, and 0 would read as a loss.
func Loss(loss float64, measured bool) string {
	if !measured {
		return "none (no step left to train: resumed at the end)"
	}
	return fmt.Sprintf("%.4f", loss)
}
