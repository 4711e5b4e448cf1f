package backend

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"github.com/xladdp/xladdp/internal/readlimit"

	"github.com/xladdp/xladdp/internal/knobs"
)

// EnvXLAFlags is XLA's own flag variable, which the plugin reads once a
// process, at its first compilation.
const EnvXLAFlags = "XLA_FLAGS"

// ynnFusionFlag chooses what XLA:CPU hands to YNNPACK. Its default in
// this XLA (dots, reductions, convolutions) splits a reduction among the
// client's threads, whose number follows the CPU device count once it
// passes the cores: the same program sums in another order with 4
// devices than with 1 (measured on a 2-core machine: a convolution bias
// gradient, the MNIST CNN's weights after one step), so a job's bits
// would depend on how many local replicas it runs. In deterministic mode
// reductions stay in XLA's own code, summed the same way at any device
// count; dots and convolutions stay with YNNPACK. Not by default: YNNPACK's
// reductions are faster (the GPT step 17%, the MNIST CNN's 12%).
const (
	ynnFusionFlag  = "xla_cpu_experimental_ynn_fusion_type"
	ynnFusionValue = "dot,individual_convolution"
)

// EnvDeterministic is Options.Deterministic for programs that do not set
// it: 1 or 0.
const EnvDeterministic = "XLADDP_DETERMINISTIC"

// The process's compilation mode, fixed by its first backend: XLA reads
// its flags once a process.
var (
	modeMu        sync.Mutex
	modeSet       bool
	deterministic bool
)

// gpuDeterministicFlag makes XLA:GPU pick deterministic kernels (no
// atomics in scatters and reductions, deterministic cuDNN and cuBLAS
// algorithms).
const gpuDeterministicFlag = "xla_gpu_deterministic_ops"

// deterministicFlags fixes the process's mode at its first Open and
// reports whether its programs are compiled deterministic: the CPU
// target's as below, the cuda target's with
// --xla_gpu_deterministic_ops=true; other targets compile as their
// plugins do (docs/ddp.md says what is known of them). A deterministic
// Open after a fast one is an error: the flags are read.
func deterministicFlags(target Target, plugin string, det bool) (bool, error) {
	modeMu.Lock()
	defer modeMu.Unlock()
	if !modeSet {
		modeSet = true
		if det {
			err := checkDeterministicXLAFlags()
			switch {
			case err != nil:
			case target == CPU:
				err = keepCPUReductionsInXLA(plugin)
			case target == CUDA:
				err = addXLAFlag(plugin, gpuDeterministicFlag, "true")
			}
			if err != nil {
				return false, err
			}
			deterministic = true
		}
	}
	if det && !deterministic {
		return false, fmt.Errorf("%w: Options.Deterministic ($%s) on a process whose first backend was opened without it: "+
			"XLA reads its flags once a process, so they are set already; open the process's first backend deterministic",
			ErrBadOption, EnvDeterministic)
	}
	return deterministic, nil
}

// DeterministicCPUDevices is the least CPU device count of a deterministic
// process: 4, or the machine's CPUs where it has more. The CPU client
// sizes its thread pool by the larger of its device count and the CPUs,
// and XLA splits some sums by the pool (YNNPACK's and Eigen's dots with a
// small output, measured on the GPT's attention projection: 1-3 devices,
// 4, and 8 or more gave three results on a 2-core machine). Every
// deterministic process on a machine opens as many, whatever it runs on
// them, so all compile and sum alike; a process with more local replicas
// than this would not, and ddp refuses it. A pool larger than the cores
// costs: 16 devices on 2 cores took 20% more per GPT step than 1, 4
// devices 7%.
func DeterministicCPUDevices() int { return max(4, machineCPUs()) }

// machineCPUs is the machine's online CPUs, whatever this process's
// affinity (ddprun binds each worker to its share): the same in every
// process of the machine.
func machineCPUs() int {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return runtime.NumCPU()
	}
	n := 0
	for _, r := range strings.Split(strings.TrimSpace(string(b)), ",") {
		lo, hi, found := strings.Cut(r, "-")
		a, err1 := strconv.Atoi(lo)
		z := a
		var err2 error
		if found {
			z, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil || z < a {
			return runtime.NumCPU()
		}
		n += z - a + 1
	}
	return max(n, 1)
}

// The CPU target in deterministic mode keeps reductions in XLA's code
// (ynnFusionFlag, added to XLA_FLAGS before the plugin reads it) and
// runs oneDNN's convolutions on one thread each (their weight gradient
// splits the batch among threads, so one core and two give other bits):
// its programs sum the same way at any device and thread count.

// deterministicOption resolves Options.Deterministic, else $XLADDP_DETERMINISTIC.
func deterministicOption(opts Options) (bool, error) {
	if opts.Deterministic {
		return true, nil
	}
	on, err := knobs.Deterministic(os.Getenv(EnvDeterministic))
	if err != nil {
		return false, fmt.Errorf("%w: %w", ErrBadOption, err)
	}
	return on, nil
}

// keepCPUReductionsInXLA adds --xla_cpu_experimental_ynn_fusion_type to
// XLA_FLAGS. A user's own value of it stands where it leaves reductions
// out, and is refused where it hands them to YNNPACK; a plugin that
// does not know the flag (XLA aborts on one it does not know) has no
// YNNPACK fusions to turn off.
func keepCPUReductionsInXLA(plugin string) error {
	if value, set := xlaFlag(ynnFusionFlag); set {
		if strings.Contains(value, "reduce") {
			return fmt.Errorf("%w: %s holds --%s=%s: deterministic programs keep reductions out of YNNPACK "+
				"(it splits them by the device count); drop the flag or give it without reduce", ErrBadOption, EnvXLAFlags, ynnFusionFlag, value)
		}
		return nil
	}
	return addXLAFlag(plugin, ynnFusionFlag, ynnFusionValue)
}

// xlaFlag is --name's value in XLA_FLAGS, and whether it is there.
func xlaFlag(name string) (string, bool) {
	flags := os.Getenv(EnvXLAFlags)
	i := strings.Index(flags, name+"=")
	if i < 0 {
		return "", false
	}
	value, _, _ := strings.Cut(flags[i+len(name)+1:], " ")
	return value, true
}

// addXLAFlag appends --name=value to XLA_FLAGS unless it names the flag
// already (a user's other value is refused) or the plugin does not know
// it (XLA aborts on a flag it does not know).
func addXLAFlag(plugin, name, value string) error {
	if got, set := xlaFlag(name); set {
		if got != value {
			return fmt.Errorf("%w: %s holds --%s=%s: deterministic programs need %s; drop the flag", ErrBadOption, EnvXLAFlags, name, got, value)
		}
		return nil
	}
	known, err := fileContains(plugin, []byte(name))
	if err != nil || !known {
		return err
	}
	return os.Setenv(EnvXLAFlags, strings.TrimSpace(fmt.Sprintf("%s --%s=%s", os.Getenv(EnvXLAFlags), name, value)))
}

// fileContains reports whether the file at path holds needle.
func fileContains(path string, needle []byte) (bool, error) {
	f, err := readlimit.OpenRegular(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<20)
	buf := make([]byte, 0, 2<<20)
	chunk := make([]byte, 1<<20)
	for {
		n, err := r.Read(chunk)
		buf = append(buf, chunk[:n]...)
		if bytes.Contains(buf, needle) {
			return true, nil
		}
		if err == io.EOF {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		// Keep a tail the needle may straddle.
		keep := min(len(buf), len(needle)-1)
		buf = append(buf[:0], buf[len(buf)-keep:]...)
	}
}
