package reference

// Conv2dVJP is Conv2d's vector-Jacobian product: the gradients of
// sum(Conv2d(x, w, o) * r) with respect to x and w, summed exactly in
// float64 over the same windows Conv2d reads (a convolution is linear in
// each operand, so no difference quotient is needed).
func Conv2dVJP(x, w, r Tensor, o ConvParams) (dx, dw Tensor) {
	n, c, hIn, wIn := x.Dims[0], x.Dims[1], x.Dims[2], x.Dims[3]
	outC, cg, kh, kw := w.Dims[0], w.Dims[1], w.Dims[2], w.Dims[3]
	hOut, wOut := r.Dims[2], r.Dims[3]
	perGroupOut := outC / o.Groups
	dx, dw = New(x.Dims...), New(w.Dims...)
	for b := range n {
		for oc := range outC {
			g := oc / perGroupOut
			for i := range hOut {
				for j := range wOut {
					v := r.V[((b*outC+oc)*hOut+i)*wOut+j]
					for ic := range cg {
						for p := range kh {
							for q := range kw {
								y := i*o.Stride[0] - o.Padding[0] + p*o.Dilation[0]
								z := j*o.Stride[1] - o.Padding[1] + q*o.Dilation[1]
								if y < 0 || y >= hIn || z < 0 || z >= wIn {
									continue
								}
								xi, wi := ((b*c+g*cg+ic)*hIn+y)*wIn+z, ((oc*cg+ic)*kh+p)*kw+q
								dx.V[xi] += v * w.V[wi]
								dw.V[wi] += v * x.V[xi]
							}
						}
					}
				}
			}
		}
	}
	return dx, dw
}
