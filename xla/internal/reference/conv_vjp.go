package reference

// Conv2dVJP is Conv2d's vector-Jacobian product: the gradients of
// sum(Conv2d(x, w, o) * r) with respect to x and w, summed exactly in
// float64 over the taps Conv2d adds (a convolution is linear in each
// operand, so no difference quotient is needed).
func Conv2dVJP(x, w, r Tensor, o ConvParams) (dx, dw Tensor) {
	dx, dw = New(x.Dims...), New(w.Dims...)
	conv2dTaps(x, w, o, func(xi, wi, oi int) {
		dx.V[xi] += r.V[oi] * w.V[wi]
		dw.V[wi] += r.V[oi] * x.V[xi]
	})
	return dx, dw
}
