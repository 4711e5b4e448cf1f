package backend

import (
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/gomlx/go-xla/pjrt"

	"github.com/xladdp/xladdp/backend/internal/onednn"
	"github.com/xladdp/xladdp/backend/internal/pjrtx"
	"github.com/xladdp/xladdp/internal/readlimit"
	"github.com/xladdp/xladdp/internal/workerenv"

	"github.com/xladdp/xladdp/internal/knobs"
)

// EnvCPUKernels chooses what runs the CPU target's convolutions:
// "onednn" (oneDNN 2.x custom calls inside the XLA program; an error
// where libdnnl.so.2 does not load), "xla" (XLA's own kernels), or unset:
// oneDNN where it loads, else XLA's, said once.
const EnvCPUKernels = knobs.EnvCPUKernels

// EnvOneDNNLibrary names the oneDNN 2.x library to load (a soname or a
// path; default libdnnl.so.2).
const EnvOneDNNLibrary = "XLADDP_ONEDNN_LIBRARY"

// Kernels names what runs the convolutions of b's programs: "onednn
// 2.6.3", or "xla" for XLA's own kernels (every target but cpu).
func (b *Backend) Kernels() string {
	if b.kernels == "" {
		return "xla"
	}
	return b.kernels
}

// cpuKernels sets the CPU plugin's convolutions up once per process (the
// FFI handlers are the plugin's, process-wide) and returns what runs
// them; where it is oneDNN, the backend builds programs through
// oneDNNConvolution.
func cpuKernels(plugin *pjrt.Plugin) (string, error) {
	kernelsOnce.Do(func() { kernelsChoice, kernelsErr = setUpCPUKernels(plugin) })
	return kernelsChoice, kernelsErr
}

var (
	kernelsOnce   sync.Once
	kernelsChoice string
	kernelsErr    error
)

func setUpCPUKernels(plugin *pjrt.Plugin) (string, error) {
	choice, err := parseCPUKernels(os.Getenv(EnvCPUKernels))
	if err != nil || choice == "xla" {
		return choice, err
	}
	library := os.Getenv(EnvOneDNNLibrary)
	var version string
	if strings.Contains(library, "/") { // a path: dlopen would wait forever on a FIFO
		err = readlimit.CheckRegular(library)
	}
	if err == nil {
		version, err = onednn.Load(library)
	}
	if err == nil {
		for _, h := range onednn.Handlers() {
			if err = pjrtx.RegisterFFIHandler(plugin, h.Target, "Host", h.Fn); err != nil {
				break
			}
		}
	}
	switch {
	case err == nil:
		return "onednn " + version, nil
	case choice == "onednn":
		return "", fmt.Errorf("%w: %s=onednn: %w: install oneDNN 2.x (Debian's libdnnl2: make deps), or unset %s",
			ErrTargetUnavailable, EnvCPUKernels, err, EnvCPUKernels)
	default:
		slog.Warn("convolutions run in XLA's own CPU kernels: "+err.Error()+" (Debian's libdnnl2 gives oneDNN's; make deps installs it)",
			"set", EnvCPUKernels+"=xla to choose them and silence this")
		return "xla", nil
	}
}

// shareConvolutionThreads gives each of a process's CPU devices its part
// of the cores for oneDNN's convolutions: their programs run at once,
// and OpenMP would start a team of every core for each. An
// OMP_NUM_THREADS the user gave (ddprun and torchrun give 1 with several
// ranks a node) stands.
func shareConvolutionThreads(devices int, deterministic bool) {
	if deterministic {
		onednn.SetThreads(1) // see deterministic.go
		return
	}
	if _, set := os.LookupEnv(workerenv.Threads); set || devices < 2 {
		onednn.SetThreads(0)
		return
	}
	onednn.SetThreads(max(1, runtime.NumCPU()/devices))
}

// parseCPUKernels reads EnvCPUKernels: "onednn", "xla", or "" (oneDNN
// where it loads).
func parseCPUKernels(v string) (string, error) {
	k, err := knobs.CPUKernels(v)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrBadOption, err)
	}
	return k, nil
}

// ConvolutionPass is what one convolution pass ran through oneDNN in this
// process: calls, time in the kernels (weight reorders included) and
// floating-point operations (all zero where XLA's kernels run them).
type ConvolutionPass struct {
	Calls int
	Time  time.Duration
	FLOP  float64
}

// OneDNNConvolutions is the process's convolutions through oneDNN so far:
// forward, input gradient and weight gradient.
type OneDNNConvolutions struct{ Forward, InputGrad, WeightGrad ConvolutionPass }

// OneDNNCalls is the process's OneDNNConvolutions so far.
func OneDNNCalls() OneDNNConvolutions {
	c := onednn.Calls()
	return OneDNNConvolutions{Forward: ConvolutionPass(c[0]), InputGrad: ConvolutionPass(c[1]), WeightGrad: ConvolutionPass(c[2])}
}
