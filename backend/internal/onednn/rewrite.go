package onednn

import (
	"bytes"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// The custom-call targets the rewrite emits, one per convolution pass.
const (
	TargetForward     = "xladdp_onednn_conv_forward"
	TargetInputGrad   = "xladdp_onednn_conv_input_grad"
	TargetWeightGrad  = "xladdp_onednn_conv_weight_grad"
	forwardDims       = "[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]"
	inputGradDims     = "[b, 0, 1, f]x[0, 1, o, i]->[b, 0, 1, f]"
	weightGradDims    = "[f, 0, 1, b]x[i, 0, 1, o]->[0, 1, b, f]"
	reversedSpatially = "array<i64: 0, 1>"
)

// Rewritten counts the convolutions a rewrite moved to oneDNN, by pass.
type Rewritten struct{ Forward, InputGrad, WeightGrad int }

// Total is the number of custom calls emitted.
func (r Rewritten) Total() int { return r.Forward + r.InputGrad + r.WeightGrad }

var (
	convHead = regexp.MustCompile(`^(\s*)(%[\w.]+) = "stablehlo.convolution"\((%[\w.]+), (%[\w.]+)\) \{$`)
	convTail = regexp.MustCompile(`^\s*\} : \((tensor<[^>]*>), (tensor<[^>]*>)\) -> (tensor<[^>]*>)$`)
	attrLine = regexp.MustCompile(`^\s*(\w+) = (.*?),?$`)
	reverse  = regexp.MustCompile(`^\s*(%[\w.]+) = "stablehlo.reverse"\((%[\w.]+)\) \{ dimensions = (array<i64: [\d, ]*>) \}`)
	f32x4    = regexp.MustCompile(`^tensor<(\d+)x(\d+)x(\d+)x(\d+)xf32>$`)
	pairs    = regexp.MustCompile(`^array<i64: (-?\d+), (-?\d+)>$`)
	padding  = regexp.MustCompile(`^dense<\[\[(-?\d+), (-?\d+)\], \[(-?\d+), (-?\d+)\]\]> : tensor<2x2xi64>$`)
)

// Rewrite turns the 2-D f32 convolutions of a StableHLO program (MLIR
// text as GoMLX v0.26.0 prints it) that are a forward pass, an input
// gradient or a weight gradient of a plain convolution (channels-last,
// one group, no dilation) into oneDNN custom calls; every other
// convolution stays XLA's. The input gradient XLA computes from the
// spatially reversed kernel; its custom call takes the kernel itself.
func Rewrite(program []byte) ([]byte, Rewritten) {
	lines := strings.Split(string(program), "\n")
	reversed := map[string]string{} // result -> operand of a spatial reverse
	var out []string
	var done Rewritten
	for i := 0; i < len(lines); i++ {
		if m := reverse.FindStringSubmatch(lines[i]); m != nil && m[3] == reversedSpatially {
			reversed[m[1]] = m[2]
		}
		head := convHead.FindStringSubmatch(lines[i])
		if head == nil {
			out = append(out, lines[i])
			continue
		}
		end := i + 1
		for end < len(lines) && !convTail.MatchString(lines[end]) && attrLine.MatchString(lines[end]) {
			end++
		}
		if end == len(lines) || !convTail.MatchString(lines[end]) {
			out = append(out, lines[i])
			continue
		}
		call, pass := customCall(head, lines[i+1:end], convTail.FindStringSubmatch(lines[end]), reversed)
		if call == "" {
			out = append(out, lines[i:end+1]...)
		} else {
			out = append(out, call)
			switch pass {
			case TargetForward:
				done.Forward++
			case TargetInputGrad:
				done.InputGrad++
			default:
				done.WeightGrad++
			}
		}
		i = end
	}
	if done.Total() == 0 {
		return program, done
	}
	return []byte(strings.Join(out, "\n")), done
}

// customCall is the custom call replacing one convolution and its target,
// or "" when oneDNN does not run this convolution.
func customCall(head []string, attrLines []string, tail []string, reversed map[string]string) (string, string) {
	attrs := map[string]string{}
	for _, l := range attrLines {
		m := attrLine.FindStringSubmatch(l)
		attrs[m[1]] = m[2]
	}
	if attrs["batch_group_count"] != "1 : i64" || attrs["feature_group_count"] != "1 : i64" ||
		attrs["window_reversal"] != "array<i1: false, false>" {
		return "", ""
	}
	c, ok := parseConvolution(attrs, tail)
	if !ok {
		return "", ""
	}
	f, ok := c.forward(attrs["dimension_numbers"], head[4], reversed)
	if !ok || !c.fits(&f) {
		return "", ""
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, `%s%s = "stablehlo.custom_call"(%s, %s) {api_version = 4 : i32, backend_config = {pad_hi = %s, pad_lo = %s, stride = %s}, call_target_name = %q} : (%s, %s) -> %s`,
		head[1], head[2], head[3], f.kernel, arrayI64(f.hi), arrayI64(f.lo), arrayI64(f.stride), f.target,
		tail[1], tail[2], tail[3])
	return b.String(), f.target
}

// convolution is a stablehlo.convolution's shapes (lhs, rhs, result) and
// window.
type convolution struct {
	lhs, rhs, res           []int64
	strides, lhsDil, rhsDil [2]int64
	lo, hi                  [2]int64
}

// parseConvolution reads a convolution's shapes from its type (tail) and
// its window from attrs; false where one is not the 2-D kind handled.
func parseConvolution(attrs map[string]string, tail []string) (convolution, bool) {
	lhs, rhs, res := dims4(tail[1]), dims4(tail[2]), dims4(tail[3])
	strides, lhsDil, rhsDil := pair(attrs["window_strides"]), pair(attrs["lhs_dilation"]), pair(attrs["rhs_dilation"])
	lo, hi, okPad := pads(attrs["padding"])
	if lhs == nil || rhs == nil || res == nil || strides == nil || lhsDil == nil || rhsDil == nil || !okPad {
		return convolution{}, false
	}
	return convolution{lhs: lhs, rhs: rhs, res: res, strides: *strides, lhsDil: *lhsDil, rhsDil: *rhsDil, lo: lo, hi: hi}, true
}

// forwardConv is the forward convolution that a custom call runs, or whose
// gradient it runs: the call's target, its kernel operand, and the
// forward's stride and padding.
type forwardConv struct {
	target, kernel string
	stride, lo, hi [2]int64
}

// forward is the forward convolution behind c, whose dimension numbers are
// dims and whose rhs is the value named rhs (reversed maps a reversed
// kernel's name to the kernel's); false where oneDNN does not run c.
func (c convolution) forward(dims, rhs string, reversed map[string]string) (forwardConv, bool) {
	one := [2]int64{1, 1}
	f := forwardConv{kernel: rhs}
	switch dims {
	case "#stablehlo.conv<" + forwardDims + ">":
		// x NHWC, w HWIO -> y NHWC.
		if c.lhsDil != one || c.rhsDil != one {
			return f, false
		}
		f.target, f.stride, f.lo, f.hi = TargetForward, c.strides, c.lo, c.hi
	case "#stablehlo.conv<" + inputGradDims + ">":
		// dy NHWC, reverse(w) HWIO -> dx NHWC: the forward's stride is
		// the dilation of dy, its low padding k-1-lo.
		kernel, ok := reversed[rhs]
		if !ok || c.rhsDil != one || c.strides != one {
			return f, false
		}
		f.kernel = kernel
		f.target, f.stride = TargetInputGrad, c.lhsDil
		for a := range 2 {
			k, h, oh := c.rhs[a], c.res[1+a], c.lhs[1+a]
			f.lo[a] = k - 1 - c.lo[a]
			f.hi[a] = (oh-1)*f.stride[a] + k - h - f.lo[a]
		}
	case "#stablehlo.conv<" + weightGradDims + ">":
		// x NHWC, dy NHWC -> dw HWIO: the forward's stride is the
		// dilation of dy.
		if c.lhsDil != one || c.strides != one {
			return f, false
		}
		f.target, f.stride, f.lo = TargetWeightGrad, c.rhsDil, c.lo
		for a := range 2 {
			k, h, oh := c.res[a], c.lhs[1+a], c.rhs[1+a]
			f.hi[a] = (oh-1)*f.stride[a] + k - h - f.lo[a]
		}
	default:
		return f, false
	}
	return f, true
}

// fits reports whether f's geometry is the one oneDNN checks, from c's
// shapes: rows past the last window (a stride that does not divide the
// input) are read by no window, so a high padding below 0 is 0 there,
// which fits sets in f.
func (c convolution) fits(f *forwardConv) bool {
	x, y, k := c.lhs, c.res, c.rhs[:2]
	switch f.target {
	case TargetInputGrad:
		x, y = c.res, c.lhs
	case TargetWeightGrad:
		y, k = c.rhs, c.res[:2]
	}
	for a := range 2 {
		f.hi[a] = max(f.hi[a], 0)
		if f.stride[a] < 1 || f.lo[a] < 0 || (x[1+a]+f.lo[a]+f.hi[a]-k[a])/f.stride[a]+1 != y[1+a] {
			return false
		}
	}
	return true
}

func dims4(tensor string) []int64 {
	m := f32x4.FindStringSubmatch(tensor)
	if m == nil {
		return nil
	}
	d := make([]int64, 4)
	for i := range d {
		d[i], _ = strconv.ParseInt(m[1+i], 10, 64)
	}
	return d
}

func pair(attr string) *[2]int64 {
	m := pairs.FindStringSubmatch(attr)
	if m == nil {
		return nil
	}
	a, _ := strconv.ParseInt(m[1], 10, 64)
	b, _ := strconv.ParseInt(m[2], 10, 64)
	return &[2]int64{a, b}
}

func pads(attr string) (lo, hi [2]int64, ok bool) {
	m := padding.FindStringSubmatch(attr)
	if m == nil {
		return lo, hi, false
	}
	var v [4]int64
	for i := range v {
		v[i], _ = strconv.ParseInt(m[1+i], 10, 64)
	}
	return [2]int64{v[0], v[2]}, [2]int64{v[1], v[3]}, true
}

func arrayI64(v [2]int64) string { return fmt.Sprintf("array<i64: %d, %d>", v[0], v[1]) }
