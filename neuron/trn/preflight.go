package trn

import (
	"os"
	"path/filepath"
)

// Problem is one preflight finding and how to fix it; Check names what
// was checked ("neuron", "runtime", "efa", "memlock").
type Problem struct {
	Check, What, Fix string
}

func (p Problem) String() string { return p.What + ": " + p.Fix }

// PreflightOptions says what to check.
type PreflightOptions struct {
	// Cores are the NeuronCores the job will use (nil: every core).
	Cores []int
	// CoresPerDevice are each device's NeuronCores as Cores counts them
	// (0: the instance's, at its logical NeuronCore setting; 2 on an
	// unknown machine).
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
		inst, ok, _ := DetectInstance(os.Getenv, func(path string) ([]byte, error) { return os.ReadFile(filepath.Join(root, path)) })
		if ok {
			perDevice = inst.CoresPerDevice()
		}
	}
	var problems []Problem
	devices, _ := filepath.Glob(filepath.Join(root, "dev", "neuron[0-9]*"))
	if len(devices) == 0 {
		problems = append(problems, Problem{"neuron", "no Neuron device (/dev/neuron*)",
			"run on a Trainium instance with the Neuron driver loaded (sudo modprobe neuron; aws-neuronx-dkms installs it)"})
	}
	if !runtimeInstalled(o.LibraryDirs) {
		problems = append(problems, Problem{"runtime", "the Neuron runtime (libnrt.so.1) is not installed",
			"install aws-neuronx-runtime-lib (apt or yum from the Neuron repository), or add its directory to LD_LIBRARY_PATH"})
	}
	wanted := map[int]bool{}
	for _, c := range o.Cores {
		wanted[c/perDevice] = true
	}
	proc := filepath.Join(root, "proc")
	for dev, pids := range Holders(proc) {
		if len(o.Cores) > 0 && !wanted[dev] {
			continue
		}
		for _, pid := range pids {
			if pid != os.Getpid() {
				problems = append(problems, HolderProblem(proc, dev, pid))
			}
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
