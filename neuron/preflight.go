package neuron

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Problem is one preflight finding and how to fix it.
type Problem struct {
	What, Fix string
}

func (p Problem) String() string { return p.What + ": " + p.Fix }

// PreflightOptions says what to check.
type PreflightOptions struct {
	// Cores are the NeuronCores the job will use (nil: every core).
	Cores []int
	// CoresPerDevice is 2 on trn1 (the default), 4 on trn2.
	CoresPerDevice int
	// Root is the filesystem root holding dev/ and proc/ ("/" unless a
	// test points elsewhere).
	Root string
	// LibraryDirs are searched for the Neuron runtime (libnrt.so.1);
	// nil: /opt/aws/neuron/lib and $LD_LIBRARY_PATH.
	LibraryDirs []string
}

// Preflight checks what a Neuron job needs before it starts, the checks
// behind "NeuronCore(s) not available": the Neuron devices exist, the
// runtime library is installed, and no other process holds the devices
// of the requested cores (naming the holder's pid and command line).
func Preflight(o PreflightOptions) []Problem {
	root := o.Root
	if root == "" {
		root = "/"
	}
	perDevice := o.CoresPerDevice
	if perDevice <= 0 {
		perDevice = 2
	}
	var problems []Problem
	devices, _ := filepath.Glob(filepath.Join(root, "dev", "neuron[0-9]*"))
	if len(devices) == 0 {
		problems = append(problems, Problem{"no Neuron device (/dev/neuron*)",
			"run on a Trainium instance with the Neuron driver loaded (sudo modprobe neuron; aws-neuronx-dkms installs it)"})
	}
	if !runtimeInstalled(o.LibraryDirs) {
		problems = append(problems, Problem{"the Neuron runtime (libnrt.so.1) is not installed",
			"install aws-neuronx-runtime-lib (apt or yum from the Neuron repository), or add its directory to LD_LIBRARY_PATH"})
	}
	wanted := map[int]bool{}
	for _, c := range o.Cores {
		wanted[c/perDevice] = true
	}
	for dev, pids := range deviceHolders(root) {
		if len(o.Cores) > 0 && !wanted[dev] {
			continue
		}
		for _, pid := range pids {
			if pid == os.Getpid() {
				continue
			}
			problems = append(problems, Problem{
				fmt.Sprintf("NeuronCore(s) of /dev/neuron%d are held by pid %d (%s)", dev, pid, commandLine(root, pid)),
				fmt.Sprintf("stop that process (kill %d) or pick other cores with NEURON_RT_VISIBLE_CORES", pid)})
		}
	}
	return problems
}

func runtimeInstalled(dirs []string) bool {
	if dirs == nil {
		dirs = append([]string{"/opt/aws/neuron/lib"}, filepath.SplitList(os.Getenv("LD_LIBRARY_PATH"))...)
	}
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "libnrt.so.1")); err == nil {
			return true
		}
	}
	return false
}

// deviceHolders maps each Neuron device number to the pids that have it
// open, from /proc/<pid>/fd.
func deviceHolders(root string) map[int][]int {
	out := map[int][]int{}
	procs, _ := os.ReadDir(filepath.Join(root, "proc"))
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		fds, _ := os.ReadDir(filepath.Join(root, "proc", p.Name(), "fd"))
		for _, fd := range fds {
			target, err := os.Readlink(filepath.Join(root, "proc", p.Name(), "fd", fd.Name()))
			if err != nil {
				continue
			}
			name := filepath.Base(target)
			rest, ok := strings.CutPrefix(name, "neuron")
			dev, err := strconv.Atoi(rest)
			if !ok || err != nil || !strings.HasPrefix(target, "/dev/") {
				continue
			}
			if !slices.Contains(out[dev], pid) {
				out[dev] = append(out[dev], pid)
			}
		}
	}
	return out
}

func commandLine(root string, pid int) string {
	b, err := os.ReadFile(filepath.Join(root, "proc", strconv.Itoa(pid), "cmdline"))
	if err != nil || len(b) == 0 {
		return "command unknown"
	}
	return strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
}
