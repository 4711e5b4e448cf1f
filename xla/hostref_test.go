package xla

import (
	"math"
	"slices"
)

// host is a float64 tensor on the host: the independent reference the op
// tests compare the device against.
type host struct {
	dims []int
	v    []float64
}

func newHost(dims ...int) host {
	n := 1
	for _, d := range dims {
		n *= d
	}
	return host{dims: slices.Clone(dims), v: make([]float64, n)}
}

func stridesOf(dims []int) []int {
	s := make([]int, len(dims))
	acc := 1
	for i := len(dims) - 1; i >= 0; i-- {
		s[i] = acc
		acc *= dims[i]
	}
	return s
}

// unravel converts a flat offset to a multi-index.
func unravel(off int, dims []int) []int {
	idx := make([]int, len(dims))
	for i := len(dims) - 1; i >= 0; i-- {
		idx[i] = off % dims[i]
		off /= dims[i]
	}
	return idx
}

func ravel(idx, dims []int) int {
	off := 0
	for i, s := range stridesOf(dims) {
		off += idx[i] * s
	}
	return off
}

func (h host) mapped(f func(float64) float64) host {
	out := newHost(h.dims...)
	for i, x := range h.v {
		out.v[i] = f(x)
	}
	return out
}

// broadcastDims applies NumPy broadcasting.
func broadcastDims(a, b []int) []int {
	rank := max(len(a), len(b))
	out := make([]int, rank)
	for i := range rank {
		da, db := 1, 1
		if k := len(a) - rank + i; k >= 0 {
			da = a[k]
		}
		if k := len(b) - rank + i; k >= 0 {
			db = b[k]
		}
		out[i] = max(da, db)
	}
	return out
}

// at reads h at an output index of a larger broadcast rank.
func (h host) at(outIdx []int) float64 {
	off := 0
	strides := stridesOf(h.dims)
	shift := len(outIdx) - len(h.dims)
	for i, d := range h.dims {
		if d != 1 {
			off += outIdx[shift+i] * strides[i]
		}
	}
	return h.v[off]
}

func zipWith(a, b host, f func(x, y float64) float64) host {
	out := newHost(broadcastDims(a.dims, b.dims)...)
	for i := range out.v {
		idx := unravel(i, out.dims)
		out.v[i] = f(a.at(idx), b.at(idx))
	}
	return out
}

// reduceHost folds over axes (sorted), dropping them.
func reduceHost(h host, axes []int, init float64, f func(acc, x float64) float64) host {
	var keep []int
	for i, d := range h.dims {
		if !slices.Contains(axes, i) {
			keep = append(keep, d)
		}
	}
	out := newHost(keep...)
	for i := range out.v {
		out.v[i] = init
	}
	for i, x := range h.v {
		idx := unravel(i, h.dims)
		var o []int
		for k, v := range idx {
			if !slices.Contains(axes, k) {
				o = append(o, v)
			}
		}
		j := ravel(o, out.dims)
		out.v[j] = f(out.v[j], x)
	}
	return out
}

func matmulHost(a, b host) host {
	k, n := b.dims[len(b.dims)-2], b.dims[len(b.dims)-1]
	m := a.dims[len(a.dims)-2]
	if len(b.dims) == 2 {
		rows := len(a.v) / k
		out := newHost(append(slices.Clone(a.dims[:len(a.dims)-1]), n)...)
		for r := range rows {
			for j := range n {
				var s float64
				for q := range k {
					s += a.v[r*k+q] * b.v[q*n+j]
				}
				out.v[r*n+j] = s
			}
		}
		return out
	}
	batch := len(a.v) / (m * k)
	out := newHost(append(slices.Clone(a.dims[:len(a.dims)-1]), n)...)
	for bi := range batch {
		for i := range m {
			for j := range n {
				var s float64
				for q := range k {
					s += a.v[bi*m*k+i*k+q] * b.v[bi*k*n+q*n+j]
				}
				out.v[bi*m*n+i*n+j] = s
			}
		}
	}
	return out
}

// softmaxHost normalizes along axis; logarithm gives log-softmax.
func softmaxHost(h host, axis int, logarithm bool) host {
	out := newHost(h.dims...)
	strides := stridesOf(h.dims)
	size := h.dims[axis]
	for i := range h.v {
		idx := unravel(i, h.dims)
		if idx[axis] != 0 {
			continue
		}
		maxV := math.Inf(-1)
		for c := range size {
			maxV = math.Max(maxV, h.v[i+c*strides[axis]])
		}
		var z float64
		for c := range size {
			z += math.Exp(h.v[i+c*strides[axis]] - maxV)
		}
		for c := range size {
			x := h.v[i+c*strides[axis]] - maxV
			if logarithm {
				out.v[i+c*strides[axis]] = x - math.Log(z)
			} else {
				out.v[i+c*strides[axis]] = math.Exp(x) / z
			}
		}
	}
	return out
}

func permuteHost(h host, perm []int) host {
	dims := make([]int, len(perm))
	for i, p := range perm {
		dims[i] = h.dims[p]
	}
	out := newHost(dims...)
	for i := range out.v {
		idx := unravel(i, dims)
		src := make([]int, len(perm))
		for k, p := range perm {
			src[p] = idx[k]
		}
		out.v[i] = h.v[ravel(src, h.dims)]
	}
	return out
}

func concatHost(axis int, hs ...host) host {
	dims := slices.Clone(hs[0].dims)
	dims[axis] = 0
	for _, h := range hs {
		dims[axis] += h.dims[axis]
	}
	out := newHost(dims...)
	for i := range out.v {
		idx := unravel(i, dims)
		for _, h := range hs {
			if idx[axis] < h.dims[axis] {
				out.v[i] = h.v[ravel(idx, h.dims)]
				break
			}
			idx[axis] -= h.dims[axis]
		}
	}
	return out
}

func narrowHost(h host, axis, start, length int) host {
	dims := slices.Clone(h.dims)
	dims[axis] = length
	out := newHost(dims...)
	for i := range out.v {
		idx := unravel(i, dims)
		idx[axis] += start
		out.v[i] = h.v[ravel(idx, h.dims)]
	}
	return out
}

func takeAlongAxisHost(h host, indices []int, idxDims []int, axis int) host {
	out := newHost(idxDims...)
	for i := range out.v {
		idx := unravel(i, idxDims)
		idx[axis] = indices[i]
		out.v[i] = h.v[ravel(idx, h.dims)]
	}
	return out
}

// conv2dHost is torch's conv2d: NCHW input, OIHW weight, zero padding.
func conv2dHost(x, w host, o Conv2dOptions) host {
	o = o.normalized()
	n, c, hIn, wIn := x.dims[0], x.dims[1], x.dims[2], x.dims[3]
	outC, cg, kh, kw := w.dims[0], w.dims[1], w.dims[2], w.dims[3]
	hOut := (hIn+2*o.Padding[0]-o.Dilation[0]*(kh-1)-1)/o.Stride[0] + 1
	wOut := (wIn+2*o.Padding[1]-o.Dilation[1]*(kw-1)-1)/o.Stride[1] + 1
	perGroupOut := outC / o.Groups
	out := newHost(n, outC, hOut, wOut)
	for b := range n {
		for oc := range outC {
			g := oc / perGroupOut
			for i := range hOut {
				for j := range wOut {
					var s float64
					for ic := range cg {
						for p := range kh {
							for q := range kw {
								y := i*o.Stride[0] - o.Padding[0] + p*o.Dilation[0]
								z := j*o.Stride[1] - o.Padding[1] + q*o.Dilation[1]
								if y < 0 || y >= hIn || z < 0 || z >= wIn {
									continue
								}
								s += x.v[((b*c+g*cg+ic)*hIn+y)*wIn+z] * w.v[((oc*cg+ic)*kh+p)*kw+q]
							}
						}
					}
					out.v[((b*outC+oc)*hOut+i)*wOut+j] = s
				}
			}
		}
	}
	return out
}

// pool2dHost is torch's max_pool2d (padding never wins) or avg_pool2d
// (count_include_pad=True).
func pool2dHost(x host, o Pool2dOptions, isMax bool) host {
	for i := range 2 {
		if o.Stride[i] == 0 {
			o.Stride[i] = o.Kernel[i]
		}
	}
	n, c, hIn, wIn := x.dims[0], x.dims[1], x.dims[2], x.dims[3]
	hOut := (hIn+2*o.Padding[0]-o.Kernel[0])/o.Stride[0] + 1
	wOut := (wIn+2*o.Padding[1]-o.Kernel[1])/o.Stride[1] + 1
	out := newHost(n, c, hOut, wOut)
	for b := range n * c {
		for i := range hOut {
			for j := range wOut {
				acc := 0.0
				if isMax {
					acc = math.Inf(-1)
				}
				for p := range o.Kernel[0] {
					for q := range o.Kernel[1] {
						y := i*o.Stride[0] - o.Padding[0] + p
						z := j*o.Stride[1] - o.Padding[1] + q
						if y < 0 || y >= hIn || z < 0 || z >= wIn {
							continue
						}
						v := x.v[(b*hIn+y)*wIn+z]
						if isMax {
							acc = math.Max(acc, v)
						} else {
							acc += v
						}
					}
				}
				if !isMax {
					acc /= float64(o.Kernel[0] * o.Kernel[1])
				}
				out.v[(b*hOut+i)*wOut+j] = acc
			}
		}
	}
	return out
}
