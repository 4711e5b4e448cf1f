package trn

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/xladdp/xladdp/internal/procfs"
)

// DeviceCount reads the NeuronCore count a launcher's environment gives a
// job: $NEURON_NUM_DEVICES, else $NEURONCORE_NUM_DEVICES (ok false when
// neither is set).
func DeviceCount(getenv func(string) string) (n int, ok bool, err error) {
	for _, name := range []string{EnvNumDevices, EnvCoreNumDevices} {
		if v := getenv(name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return 0, false, fmt.Errorf("$%s=%q: want a positive device count", name, v)
			}
			return n, true, nil
		}
	}
	return 0, false, nil
}

// CountDevices counts the Neuron devices (chips) in devDir: its
// neuron<N> entries.
func CountDevices(devDir string) int {
	entries, err := os.ReadDir(devDir)
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range entries {
		if _, ok := DeviceNumber(filepath.Join("/dev", e.Name())); ok {
			n++
		}
	}
	return n
}

// DeviceNumber is N of the device path /dev/neuronN, if path is one.
func DeviceNumber(path string) (int, bool) {
	rest, ok := strings.CutPrefix(path, "/dev/neuron")
	dev, err := strconv.Atoi(rest)
	return dev, ok && err == nil && rest != "" && !strings.ContainsAny(rest, "/+-")
}

// Holders maps each Neuron device number to the pids that hold it open,
// read from procDir's /proc/<pid>/fd (the Neuron runtime then fails with
// "NeuronCore(s) not available").
func Holders(procDir string) map[int][]int {
	out := map[int][]int{}
	held := procfs.Holders(procDir, func(target string) bool {
		_, ok := DeviceNumber(target)
		return ok
	})
	for target, pids := range held {
		dev, _ := DeviceNumber(target)
		for _, pid := range pids {
			if !slices.Contains(out[dev], pid) {
				out[dev] = append(out[dev], pid)
			}
		}
	}
	return out
}

// HolderProblem is the finding for pid holding /dev/neuron<dev>, with
// how to free the cores.
func HolderProblem(procDir string, dev, pid int) Problem {
	return Problem{
		Check: "neuron",
		What:  fmt.Sprintf("NeuronCore(s) of /dev/neuron%d are held by pid %d (%s)", dev, pid, procfs.CommandLine(procDir, pid)),
		Fix: fmt.Sprintf("stop that process (kill %d; a finished job's orphan keeps the cores) or give this job other cores with %s",
			pid, EnvVisibleCores),
	}
}
