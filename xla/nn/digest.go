package nn

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
)

// WeightsDigest is the sha256 of module's parameters, then its buffers
// (BatchNorm's running statistics): each one's name, dtype, shape and
// bytes, in order. Two runs trained alike print the same.
func WeightsDigest(ctx context.Context, module Module) (string, error) {
	h := sha256.New()
	for _, p := range append(NamedParameters(module), NamedBuffers(module)...) {
		t := p.Tensor
		fmt.Fprintf(h, "%s %s %v\n", p.Name, t.DType(), t.Dims())
		b := make([]byte, t.Shape().Memory())
		if err := t.CopyBytesTo(ctx, b); err != nil {
			return "", fmt.Errorf("reading %s for the weights' digest: %w", p.Name, err)
		}
		h.Write(binary.LittleEndian.AppendUint64(nil, uint64(len(b))))
		h.Write(b)
	}
	return fmt.Sprintf("%x", h.Sum(nil)), nil
}
