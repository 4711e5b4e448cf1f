package xla

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/backend"
)

// convolutionChildReport is what convolutionChild prints: the kernels
// that ran, and a stride-2 convolution's output and gradients.
type convolutionChildReport struct {
	Kernels    string
	Y, DX, DW  []float32
	OneDNNRuns int
}

// convolutionChild runs ResNet's 3x3 stride-2 convolution forward and
// backward on the CPU target as the environment sets it up, and prints
// a convolutionChildReport as JSON (an Open error on stderr, exit 1).
func convolutionChild() int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := backend.Open(ctx, backend.Options{Target: backend.CPU})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer b.Close()
	d := NewEngine(b).Device(0)
	values := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(math.Sin(float64(i) * 0.37)) // the same inputs in every child
		}
		return v
	}
	x, err1 := FromSlice(d, values(2*64*9*9), 2, 64, 9, 9)
	w, err2 := FromSlice(d, values(128*64*3*3), 128, 64, 3, 3)
	if err := errors.Join(err1, err2); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := errors.Join(x.SetRequiresGrad(true), w.SetRequiresGrad(true)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	y := Conv2d(x, w, Conv2dOptions{Stride: [2]int{2, 2}, Padding: [2]int{1, 1}})
	r, err := FromSlice(d, values(2*128*5*5), 2, 128, 5, 5)
	if err == nil {
		err = y.Mul(r).Sum().Backward()
	}
	report := convolutionChildReport{Kernels: b.Kernels()}
	for _, out := range []struct {
		t   *Tensor
		dst *[]float32
	}{{y, &report.Y}, {x.Grad(), &report.DX}, {w.Grad(), &report.DW}} {
		if err == nil {
			*out.dst, err = out.t.Float32s(ctx)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	report.OneDNNRuns = backend.OneDNNCalls().Forward.Calls
	out, _ := json.Marshal(report)
	fmt.Println(string(out))
	return 0
}

// runConvolutionChild runs convolutionChild with env added.
func runConvolutionChild(t *testing.T, env ...string) (convolutionChildReport, string, error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append([]string{childModeEnv + "=convolutions", EnvCacheDir + "=" + t.TempDir()}, env...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var report convolutionChildReport
	if err == nil {
		require.NoError(t, json.Unmarshal(out, &report), "%s", out)
	}
	return report, stderr.String(), err
}

// TestConvolutionsWhereOneDNNIsMissing: a process that cannot load oneDNN
// (XLADDP_ONEDNN_LIBRARY naming nothing) says so once and runs the same
// convolutions in XLA's kernels, to float32 tolerance of oneDNN's; with
// XLADDP_CPU_KERNELS=onednn it refuses to start instead, naming the
// library and the fix; XLADDP_CPU_KERNELS=xla chooses XLA's in silence.
func TestConvolutionsWhereOneDNNIsMissing(t *testing.T) {
	withOneDNN, _, err := runConvolutionChild(t, backend.EnvCPUKernels+"=")
	require.NoError(t, err)
	requireOneDNN(t, withOneDNN.Kernels)
	assert.Positive(t, withOneDNN.OneDNNRuns)

	missing := backend.EnvOneDNNLibrary + "=/nonexistent/libdnnl.so.2"
	without, stderr, err := runConvolutionChild(t, backend.EnvCPUKernels+"=", missing)
	require.NoError(t, err, stderr)
	assert.Equal(t, "xla", without.Kernels)
	assert.Zero(t, without.OneDNNRuns)
	assert.Equal(t, 1, strings.Count(stderr, "convolutions run in XLA's own CPU kernels"), "said once: %s", stderr)
	assert.Contains(t, stderr, "/nonexistent/libdnnl.so.2")
	for _, c := range []struct {
		name      string
		want, got []float32
	}{{"y", withOneDNN.Y, without.Y}, {"dx", withOneDNN.DX, without.DX}, {"dw", withOneDNN.DW, without.DW}} {
		require.Len(t, c.got, len(c.want), c.name)
		for i := range c.want {
			require.InDelta(t, c.want[i], c.got[i], 1e-4*(1+math.Abs(float64(c.want[i]))), "%s[%d]", c.name, i)
		}
	}

	_, stderr, err = runConvolutionChild(t, backend.EnvCPUKernels+"=onednn", missing)
	require.Error(t, err, "XLADDP_CPU_KERNELS=onednn without oneDNN must not start")
	assert.Contains(t, stderr, "XLADDP_CPU_KERNELS=onednn")
	assert.Contains(t, stderr, "/nonexistent/libdnnl.so.2")
	assert.Contains(t, stderr, "make deps")

	// A FIFO named as the library: dlopen would wait for a writer forever.
	fifo := filepath.Join(t.TempDir(), "libdnnl.so.2")
	require.NoError(t, syscall.Mkfifo(fifo, 0o644))
	_, stderr, err = runConvolutionChild(t, backend.EnvCPUKernels+"=onednn", backend.EnvOneDNNLibrary+"="+fifo)
	require.Error(t, err)
	assert.Contains(t, stderr, fifo+" is a FIFO, not a regular file")

	chosen, stderr, err := runConvolutionChild(t, backend.EnvCPUKernels+"=xla")
	require.NoError(t, err, stderr)
	assert.Equal(t, "xla", chosen.Kernels)
	assert.NotContains(t, stderr, "XLA's own CPU kernels")
}
