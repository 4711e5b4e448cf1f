// Package reference holds float64 host implementations of xladdp's ops:
// the independent references tests compare the device against. Plain loops,
// written for clarity, not speed.
package reference

import (
	"math"
	"slices"
)

// Tensor is a row-major float64 tensor.
type Tensor struct {
	Dims []int
	V    []float64
}

// New returns a zero tensor of dims.
func New(dims ...int) Tensor {
	n := 1
	for _, d := range dims {
		n *= d
	}
	return Tensor{Dims: slices.Clone(dims), V: make([]float64, n)}
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

// Unravel converts a flat offset to a multi-index.
func Unravel(off int, dims []int) []int {
	idx := make([]int, len(dims))
	for i := len(dims) - 1; i >= 0; i-- {
		idx[i] = off % dims[i]
		off /= dims[i]
	}
	return idx
}

// Ravel converts a multi-index to a flat offset.
func Ravel(idx, dims []int) int {
	off := 0
	for i, s := range stridesOf(dims) {
		off += idx[i] * s
	}
	return off
}

// Map applies f elementwise.
func (h Tensor) Map(f func(float64) float64) Tensor {
	out := New(h.Dims...)
	for i, x := range h.V {
		out.V[i] = f(x)
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
func (h Tensor) at(outIdx []int) float64 {
	off := 0
	strides := stridesOf(h.Dims)
	shift := len(outIdx) - len(h.Dims)
	for i, d := range h.Dims {
		if d != 1 {
			off += outIdx[shift+i] * strides[i]
		}
	}
	return h.V[off]
}

// ZipWith applies f elementwise with NumPy broadcasting.
func ZipWith(a, b Tensor, f func(x, y float64) float64) Tensor {
	out := New(broadcastDims(a.Dims, b.Dims)...)
	for i := range out.V {
		idx := Unravel(i, out.Dims)
		out.V[i] = f(a.at(idx), b.at(idx))
	}
	return out
}

// Reduce folds over axes (sorted), dropping them.
func Reduce(h Tensor, axes []int, init float64, f func(acc, x float64) float64) Tensor {
	var keep []int
	for i, d := range h.Dims {
		if !slices.Contains(axes, i) {
			keep = append(keep, d)
		}
	}
	out := New(keep...)
	for i := range out.V {
		out.V[i] = init
	}
	for i, x := range h.V {
		idx := Unravel(i, h.Dims)
		var o []int
		for k, v := range idx {
			if !slices.Contains(axes, k) {
				o = append(o, v)
			}
		}
		j := Ravel(o, out.Dims)
		out.V[j] = f(out.V[j], x)
	}
	return out
}

// MatMul is [..., k] x [k, n], or batched [B..., m, k] x [B..., k, n].
func MatMul(a, b Tensor) Tensor {
	k, n := b.Dims[len(b.Dims)-2], b.Dims[len(b.Dims)-1]
	m := a.Dims[len(a.Dims)-2]
	if len(b.Dims) == 2 {
		rows := len(a.V) / k
		out := New(append(slices.Clone(a.Dims[:len(a.Dims)-1]), n)...)
		for r := range rows {
			for j := range n {
				var s float64
				for q := range k {
					s += a.V[r*k+q] * b.V[q*n+j]
				}
				out.V[r*n+j] = s
			}
		}
		return out
	}
	batch := len(a.V) / (m * k)
	out := New(append(slices.Clone(a.Dims[:len(a.Dims)-1]), n)...)
	for bi := range batch {
		for i := range m {
			for j := range n {
				var s float64
				for q := range k {
					s += a.V[bi*m*k+i*k+q] * b.V[bi*k*n+q*n+j]
				}
				out.V[bi*m*n+i*n+j] = s
			}
		}
	}
	return out
}

// Softmax normalizes along axis; logarithm gives log-softmax.
func Softmax(h Tensor, axis int, logarithm bool) Tensor {
	out := New(h.Dims...)
	strides := stridesOf(h.Dims)
	size := h.Dims[axis]
	for i := range h.V {
		idx := Unravel(i, h.Dims)
		if idx[axis] != 0 {
			continue
		}
		maxV := math.Inf(-1)
		for c := range size {
			maxV = math.Max(maxV, h.V[i+c*strides[axis]])
		}
		var z float64
		for c := range size {
			z += math.Exp(h.V[i+c*strides[axis]] - maxV)
		}
		for c := range size {
			x := h.V[i+c*strides[axis]] - maxV
			if logarithm {
				out.V[i+c*strides[axis]] = x - math.Log(z)
			} else {
				out.V[i+c*strides[axis]] = math.Exp(x) / z
			}
		}
	}
	return out
}

// Permute reorders axes: output axis i is input axis perm[i].
func Permute(h Tensor, perm []int) Tensor {
	dims := make([]int, len(perm))
	for i, p := range perm {
		dims[i] = h.Dims[p]
	}
	out := New(dims...)
	for i := range out.V {
		idx := Unravel(i, dims)
		src := make([]int, len(perm))
		for k, p := range perm {
			src[p] = idx[k]
		}
		out.V[i] = h.V[Ravel(src, h.Dims)]
	}
	return out
}

// Concat joins tensors along axis.
func Concat(axis int, hs ...Tensor) Tensor {
	dims := slices.Clone(hs[0].Dims)
	dims[axis] = 0
	for _, h := range hs {
		dims[axis] += h.Dims[axis]
	}
	out := New(dims...)
	for i := range out.V {
		idx := Unravel(i, dims)
		for _, h := range hs {
			if idx[axis] < h.Dims[axis] {
				out.V[i] = h.V[Ravel(idx, h.Dims)]
				break
			}
			idx[axis] -= h.Dims[axis]
		}
	}
	return out
}

// Narrow takes length elements from start along axis.
func Narrow(h Tensor, axis, start, length int) Tensor {
	dims := slices.Clone(h.Dims)
	dims[axis] = length
	out := New(dims...)
	for i := range out.V {
		idx := Unravel(i, dims)
		idx[axis] += start
		out.V[i] = h.V[Ravel(idx, h.Dims)]
	}
	return out
}

// TakeAlongAxis is torch.gather(h, axis, indices) with indices of dims idxDims.
func TakeAlongAxis(h Tensor, indices []int, idxDims []int, axis int) Tensor {
	out := New(idxDims...)
	for i := range out.V {
		idx := Unravel(i, idxDims)
		idx[axis] = indices[i]
		out.V[i] = h.V[Ravel(idx, h.Dims)]
	}
	return out
}

// ConvParams are conv2d's stride, padding, dilation (all >= 1 except
// padding) and groups (>= 1).
type ConvParams struct {
	Stride, Padding, Dilation [2]int
	Groups                    int
}

// Conv2d is torch's conv2d: NCHW input, OIHW weight, zero padding.
func Conv2d(x, w Tensor, o ConvParams) Tensor {
	out := New(conv2dOutDims(x, w, o)...)
	conv2dTaps(x, w, o, func(xi, wi, oi int) { out.V[oi] += x.V[xi] * w.V[wi] })
	return out
}

// conv2dOutDims is Conv2d's output shape.
func conv2dOutDims(x, w Tensor, o ConvParams) []int {
	hOut := (x.Dims[2]+2*o.Padding[0]-o.Dilation[0]*(w.Dims[2]-1)-1)/o.Stride[0] + 1
	wOut := (x.Dims[3]+2*o.Padding[1]-o.Dilation[1]*(w.Dims[3]-1)-1)/o.Stride[1] + 1
	return []int{x.Dims[0], w.Dims[0], hOut, wOut}
}

// conv2dTaps calls tap with the flat indices of every input element,
// weight and output element Conv2d multiplies and adds, padding skipped.
func conv2dTaps(x, w Tensor, o ConvParams, tap func(xi, wi, oi int)) {
	n, c, hIn, wIn := x.Dims[0], x.Dims[1], x.Dims[2], x.Dims[3]
	outC, cg, kh, kw := w.Dims[0], w.Dims[1], w.Dims[2], w.Dims[3]
	dims := conv2dOutDims(x, w, o)
	hOut, wOut := dims[2], dims[3]
	perGroupOut := outC / o.Groups
	for b := range n {
		for oc := range outC {
			g := oc / perGroupOut
			for i := range hOut {
				for j := range wOut {
					oi := ((b*outC+oc)*hOut+i)*wOut + j
					for ic := range cg {
						for p := range kh {
							for q := range kw {
								y := i*o.Stride[0] - o.Padding[0] + p*o.Dilation[0]
								z := j*o.Stride[1] - o.Padding[1] + q*o.Dilation[1]
								if y < 0 || y >= hIn || z < 0 || z >= wIn {
									continue
								}
								tap(((b*c+g*cg+ic)*hIn+y)*wIn+z, ((oc*cg+ic)*kh+p)*kw+q, oi)
							}
						}
					}
				}
			}
		}
	}
}

// PoolParams are a 2-D pool's kernel, stride (0 means the kernel) and padding.
type PoolParams struct {
	Kernel, Stride, Padding [2]int
}

// Pool2d is torch's max_pool2d (padding never wins) or avg_pool2d
// (count_include_pad=True).
func Pool2d(x Tensor, o PoolParams, isMax bool) Tensor {
	for i := range 2 {
		if o.Stride[i] == 0 {
			o.Stride[i] = o.Kernel[i]
		}
	}
	n, c, hIn, wIn := x.Dims[0], x.Dims[1], x.Dims[2], x.Dims[3]
	hOut := (hIn+2*o.Padding[0]-o.Kernel[0])/o.Stride[0] + 1
	wOut := (wIn+2*o.Padding[1]-o.Kernel[1])/o.Stride[1] + 1
	out := New(n, c, hOut, wOut)
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
						v := x.V[(b*hIn+y)*wIn+z]
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
				out.V[(b*hOut+i)*wOut+j] = acc
			}
		}
	}
	return out
}

// IndexSelect picks the slices at indices along axis (torch.index_select).
func IndexSelect(h Tensor, axis int, indices []int) Tensor {
	dims := slices.Clone(h.Dims)
	dims[axis] = len(indices)
	out := New(dims...)
	for i := range out.V {
		idx := Unravel(i, dims)
		idx[axis] = indices[idx[axis]]
		out.V[i] = h.V[Ravel(idx, h.Dims)]
	}
	return out
}

// Tril zeroes the elements above the diagonal-th diagonal of the last
// two axes (torch.tril).
func Tril(h Tensor, diagonal int) Tensor {
	out := New(h.Dims...)
	r := len(h.Dims)
	for i, v := range h.V {
		idx := Unravel(i, h.Dims)
		if idx[r-1]-idx[r-2] <= diagonal {
			out.V[i] = v
		}
	}
	return out
}
