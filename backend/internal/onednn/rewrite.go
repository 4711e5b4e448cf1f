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
	lhs, rhs, res := dims4(tail[1]), dims4(tail[2]), dims4(tail[3])
	strides, lhsDil, rhsDil := pair(attrs["window_strides"]), pair(attrs["lhs_dilation"]), pair(attrs["rhs_dilation"])
	lo, hi, okPad := pads(attrs["padding"])
	if lhs == nil || rhs == nil || res == nil || strides == nil || lhsDil == nil || rhsDil == nil || !okPad {
		return "", ""
	}
	one := [2]int64{1, 1}
	operands := [2]string{head[3], head[4]}
	var target string
	var fwdStride, fwdLo, fwdHi [2]int64
	switch attrs["dimension_numbers"] {
	case "#stablehlo.conv<" + forwardDims + ">":
		// x NHWC, w HWIO -> y NHWC.
		if *lhsDil != one || *rhsDil != one {
			return "", ""
		}
		target, fwdStride, fwdLo, fwdHi = TargetForward, *strides, lo, hi
	case "#stablehlo.conv<" + inputGradDims + ">":
		// dy NHWC, reverse(w) HWIO -> dx NHWC: the forward's stride is
		// the dilation of dy, its low padding k-1-lo.
		kernel, ok := reversed[head[4]]
		if !ok || *rhsDil != one || *strides != one {
			return "", ""
		}
		operands[1] = kernel
		target, fwdStride = TargetInputGrad, *lhsDil
		for a := range 2 {
			k, h, oh := rhs[a], res[1+a], lhs[1+a]
			fwdLo[a] = k - 1 - lo[a]
			fwdHi[a] = (oh-1)*fwdStride[a] + k - h - fwdLo[a]
		}
	case "#stablehlo.conv<" + weightGradDims + ">":
		// x NHWC, dy NHWC -> dw HWIO: the forward's stride is the
		// dilation of dy.
		if *lhsDil != one || *strides != one {
			return "", ""
		}
		target, fwdStride, fwdLo = TargetWeightGrad, *rhsDil, lo
		for a := range 2 {
			k, h, oh := res[a], lhs[1+a], rhs[1+a]
			fwdHi[a] = (oh-1)*fwdStride[a] + k - h - fwdLo[a]
		}
	default:
		return "", ""
	}
	// The forward convolution's geometry, as oneDNN checks it: rows past
	// the last window (a stride that does not divide the input) are read
	// by no window, so a high padding below 0 is 0 there.
	x, y, k := lhs, res, rhs[:2]
	switch target {
	case TargetInputGrad:
		x, y = res, lhs
	case TargetWeightGrad:
		y, k = rhs, res[:2]
	}
	for a := range 2 {
		fwdHi[a] = max(fwdHi[a], 0)
		if fwdStride[a] < 1 || fwdLo[a] < 0 || (x[1+a]+fwdLo[a]+fwdHi[a]-k[a])/fwdStride[a]+1 != y[1+a] {
			return "", ""
		}
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, `%s%s = "stablehlo.custom_call"(%s, %s) {api_version = 4 : i32, backend_config = {pad_hi = %s, pad_lo = %s, stride = %s}, call_target_name = %q} : (%s, %s) -> %s`,
		head[1], head[2], operands[0], operands[1], arrayI64(fwdHi), arrayI64(fwdLo), arrayI64(fwdStride), target,
		tail[1], tail[2], tail[3])
	return b.String(), target
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
