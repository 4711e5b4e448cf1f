package preflight

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/xladdp/xladdp/internal/workerenv"
	"github.com/xladdp/xladdp/neuron/trn"
)

// Host is where the checks look: this machine's tables, or a test's.
type Host struct {
	Proc, Sys, ShmDir string
	// Memlock is the soft RLIMIT_MEMLOCK in bytes (math.MaxUint64 when
	// unlimited).
	Memlock func() (uint64, error)
	Getenv  func(string) string
}

// ThisHost is the machine the process runs on.
func ThisHost() Host {
	return Host{Proc: "/proc", Sys: "/sys", ShmDir: "/dev/shm", Getenv: os.Getenv, Memlock: func() (uint64, error) {
		var l syscall.Rlimit
		err := syscall.Getrlimit(rlimitMemlock, &l)
		return l.Cur, err
	}}
}

// rlimitMemlock is RLIMIT_MEMLOCK on Linux.
const rlimitMemlock = 8

// Job is what the checks need of the job about to start here.
type Job struct {
	NProcPerNode, NNodes int
	// MasterAddr and MasterPort are where the job meets (MasterPort 0:
	// ddprun picks a free port).
	MasterAddr string
	MasterPort int
	// ShmMiB is each rank's shared-memory slot (0: the path is off).
	ShmMiB int
}

// dialWait bounds how long a check waits for the network.
const dialWait = 2 * time.Second

// MasterAddr checks that the job's MASTER_ADDR resolves and, on a node
// other than the one it names, that it answers on the port within
// dialWait.
func MasterAddr(ctx context.Context, j Job, local func(host string) bool) []Finding {
	if j.MasterAddr == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, dialWait)
	defer cancel()
	if _, err := net.DefaultResolver.LookupHost(ctx, j.MasterAddr); err != nil {
		return []Finding{{Check: "master_addr", Problem: fmt.Sprintf("%s=%s does not resolve (%v)", workerenv.MasterAddr, j.MasterAddr, err),
			Fix: "give node 0's IP address, or a name every node resolves (/etc/hosts, DNS)"}}
	}
	if j.MasterPort == 0 || local(j.MasterAddr) {
		return nil
	}
	addr := net.JoinHostPort(j.MasterAddr, strconv.Itoa(j.MasterPort))
	// Refused, it is retried until the check's time is up: started on
	// every node at once (pbsdsh, srun, SageMaker), node 0 may listen a
	// moment after the others ask.
	var err error
	for {
		var conn net.Conn
		if conn, err = (&net.Dialer{}).DialContext(ctx, "tcp", addr); err == nil {
			conn.Close()
			return nil
		}
		if !errors.Is(err, syscall.ECONNREFUSED) || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
			continue
		}
		break
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return []Finding{{Check: "master_addr", Problem: fmt.Sprintf("nothing listens at %s (MASTER_ADDR:MASTER_PORT)", addr),
			Fix: "start node 0 (ddprun --node_rank=0) first, and check that every node gives the same --master_port"}}
	}
	return []Finding{{Check: "master_addr", Problem: fmt.Sprintf("%s (MASTER_ADDR:MASTER_PORT) is unreachable from here (%v)", addr, err),
		Fix: "check the route to node 0 and that its firewall or security group lets TCP in on that port (and on the ports the ranks pick)"}}
}

// ShmSpace checks that the shared-memory path's slots fit in /dev/shm.
func ShmSpace(h Host, j Job) []Finding {
	if j.ShmMiB <= 0 || j.NProcPerNode < 2 {
		return nil
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(h.ShmDir, &st); err != nil {
		return []Finding{{Check: "shm", Problem: fmt.Sprintf("%s is unusable (%v)", h.ShmDir, err),
			Fix: "mount a tmpfs there, or set XLADDP_SHM_MIB=0 to run between local ranks over TCP"}}
	}
	free := st.Bavail * uint64(st.Bsize) >> 20
	need := uint64(j.NProcPerNode) * uint64(j.ShmMiB)
	if free >= need {
		return nil
	}
	return []Finding{{Check: "shm", Problem: fmt.Sprintf("%s has %d MiB free, and %d ranks' shared-memory slots of %d MiB need %d MiB",
		h.ShmDir, free, j.NProcPerNode, j.ShmMiB, need),
		Fix: "enlarge it (docker run --shm-size, mount -o remount,size=...), lower XLADDP_SHM_MIB, or set XLADDP_SHM_MIB=0 (TCP between local ranks)"}}
}

// EFA checks what a job across Trainium nodes needs of EFA (package
// trn's checks): the devices, FI_PROVIDER left to efa, and a memlock
// limit the provider can register the buffers under.
func EFA(h Host, j Job) []Finding {
	inst, ok, _ := trn.DetectInstance(h.Getenv, func(path string) ([]byte, error) {
		return os.ReadFile(filepath.Join(h.Sys, strings.TrimPrefix(path, "/sys")))
	})
	if !ok {
		return nil
	}
	var out []Finding
	for _, p := range trn.EFAProblems(inst, j.NNodes, h.Getenv, h.Sys, h.Memlock) {
		out = append(out, Finding{Check: p.Check, Problem: p.What, Fix: p.Fix})
	}
	return out
}

// NeuronCores names the other processes that hold a Neuron device open
// (the runtime then fails with "NeuronCore(s) not available").
func NeuronCores(h Host) []Finding {
	var out []Finding
	for dev, pids := range trn.Holders(h.Proc) {
		for _, pid := range pids {
			if pid != os.Getpid() {
				p := trn.HolderProblem(h.Proc, dev, pid)
				out = append(out, Finding{Check: p.Check, Problem: p.What, Fix: p.Fix})
			}
		}
	}
	return out
}

// NeuronSDK finds the Neuron SDK as a worker's bootstrap will (package
// trn's search, no Python run) and returns the line that says what was
// found ("" when nothing was) and what would stop it from loading. On a
// Trainium instance, finding no SDK is a problem too.
func NeuronSDK(h Host) (string, []Finding) {
	sdk, found, searched, err := trn.FindSDK(h.Getenv)
	if err != nil {
		return "", []Finding{{Check: "neuron sdk", Problem: err.Error()}}
	}
	if !found {
		_, trainium, _ := trn.DetectInstance(h.Getenv, func(path string) ([]byte, error) {
			return os.ReadFile(filepath.Join(h.Sys, strings.TrimPrefix(path, "/sys")))
		})
		if !trainium {
			return "", nil
		}
		return "", []Finding{{Check: "neuron sdk", Problem: "libneuronxla is in none of " + strings.Join(searched, ", "),
			Fix: "activate the venv that has it (source /opt/aws_neuronx_venv_*/bin/activate on the DLAMI), or pip install libneuronxla neuronx-cc " +
				"from https://pip.repos.neuron.amazonaws.com"}}
	}
	var out []Finding
	for _, p := range sdk.Problems(h.Getenv) {
		out = append(out, Finding{Check: p.Check, Problem: p.What, Fix: p.Fix})
	}
	return "neuron sdk: " + sdk.String(), out
}
