package main

import (
	"context"
	"math/rand/v2"

	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
)

// sampleTemperature sharpens the sampling distribution a little, as
// nanoGPT's sample.py (0.8).
const sampleTemperature = 0.8

// generate samples n characters from the model after a newline. Every
// step runs the same program: the context is padded to the block size
// (causal attention: the padding after it changes nothing) and the
// position read is an input, so generation compiles once. Every replica
// samples the same text (same seed), so replicas in one process stay in
// step.
func generate(ctx context.Context, t *trainer, n int) (string, error) {
	nn.Eval(t.net)
	defer nn.Train(t.net)
	rng := rand.New(rand.NewPCG(t.c.seed, 0x5a4d))
	block, vocab := t.c.model.BlockSize, t.c.model.Vocab
	tokens := []int32{t.text.index['\n']} // 0 when the text has no newline
	window := make([]int32, block)
	for range n {
		context := tokens[max(0, len(tokens)-block):]
		clear(window)
		copy(window, context)
		x, err := xla.FromSlice(t.w.Device, window, 1, block)
		if err != nil {
			return "", err
		}
		at, err := xla.FromSlice(t.w.Device, []int32{int32(len(context) - 1)}, 1)
		if err != nil {
			return "", err
		}
		logits := t.net.Forward(x).Reshape(block, vocab).IndexSelect(0, at).Cast(xla.Float32)
		probs, err := logits.DivScalar(sampleTemperature).Softmax(-1).Float32s(ctx)
		if err != nil {
			return "", err
		}
		tokens = append(tokens, draw(rng, probs))
	}
	return t.text.decode(tokens[1:]), nil
}

// draw picks an index with probability probs[i].
func draw(rng *rand.Rand, probs []float32) int32 {
	u := rng.Float64()
	var acc float64
	for i, p := range probs {
		acc += float64(p)
		if u < acc {
			return int32(i)
		}
	}
	return int32(len(probs) - 1)
}
