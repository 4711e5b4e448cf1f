package report

import (
	"context"

	"github.com/xladdp/xladdp/ddp/dist"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/data"
	"github.com/xladdp/xladdp/xla/nn"
)

// Accuracy is the share of ds that net classifies right, in evaluation
// mode, in batches of batch on d. Every replica of a process must call it
// (they run the same programs); with the same weights all get the same
// answer. It declares the evaluation to the job (dist's Busy), so that
// ddprun takes a long one for work, not a stall.
func Accuracy(ctx context.Context, net nn.Module, d *xla.Device, ds data.Dataset, batch int) (float64, error) {
	defer dist.Current().Busy("evaluating")()
	nn.Eval(net)
	defer nn.Train(net)
	loader, err := data.NewLoader(ds, d, data.LoaderConfig{BatchSize: batch})
	if err != nil {
		return 0, err
	}
	correct := 0.0
	for b, err := range loader.Epoch(ctx, 0) {
		if err != nil {
			return 0, err
		}
		hits, err := net.Forward(b.Input).ArgMax(1).Equal(b.Target).Cast(xla.Float32).Sum().Item(ctx)
		if err != nil {
			return 0, err
		}
		correct += hits
	}
	return correct / float64(ds.Len()), nil
}
