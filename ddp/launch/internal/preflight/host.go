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

	"github.com/xladdp/xladdp/internal/procfs"
	"github.com/xladdp/xladdp/internal/workerenv"
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
// other than the one it names, that it answers on the port.
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
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err == nil {
		conn.Close()
		return nil
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

// trainium reports whether the host is a Trainium instance (EC2's DMI
// name, or $XLADDP_NEURON_INSTANCE_TYPE as the neuron target reads it).
func trainium(h Host) (string, bool) {
	name := strings.TrimSpace(h.Getenv("XLADDP_NEURON_INSTANCE_TYPE"))
	if name == "" {
		b, _ := os.ReadFile(filepath.Join(h.Sys, "devices/virtual/dmi/id/product_name"))
		name = strings.TrimSpace(string(b))
	}
	return name, strings.HasPrefix(name, "trn")
}

// efaDevices lists the host's EFA devices (/sys/class/infiniband/*,
// which the EFA driver names rdmap*).
func efaDevices(h Host) []string {
	devs, _ := filepath.Glob(filepath.Join(h.Sys, "class/infiniband/*"))
	return devs
}

// unlimited is RLIM_INFINITY.
const unlimited = ^uint64(0)

// EFA checks what a job across Trainium nodes needs of EFA: the devices,
// FI_PROVIDER left to efa, and a memlock limit the provider can register
// the buffers under.
func EFA(h Host, j Job) []Finding {
	inst, trn := trainium(h)
	if j.NNodes < 2 || !trn {
		return nil
	}
	var out []Finding
	if len(efaDevices(h)) == 0 {
		out = append(out, Finding{Check: "efa", Problem: fmt.Sprintf("this %s has no EFA device (%s/class/infiniband is empty)", inst, h.Sys),
			Fix: "launch the instances with their EFA interfaces (and the aws-efa-installer driver); nodes cannot reach each other's NeuronCores without"})
	}
	if p := h.Getenv("FI_PROVIDER"); p != "" && p != "efa" {
		out = append(out, Finding{Check: "efa", Problem: fmt.Sprintf("FI_PROVIDER=%s on a %d-node Trainium job", p, j.NNodes),
			Fix: "unset it (ddprun sets FI_PROVIDER=efa and FI_EFA_USE_DEVICE_RDMA=1 across nodes) or export FI_PROVIDER=efa"})
	}
	if h.Memlock != nil {
		if lim, err := h.Memlock(); err == nil && lim != unlimited {
			out = append(out, Finding{Check: "memlock", Problem: fmt.Sprintf("the memlock limit is %d KiB; EFA pins every buffer it sends", lim>>10),
				Fix: "ulimit -l unlimited before ddprun (LimitMEMLOCK=infinity in a systemd unit, --ulimit memlock=-1 in docker)"})
		}
	}
	return out
}

// NeuronCores names the other processes that hold a Neuron device open
// (the runtime then fails with "NeuronCore(s) not available").
func NeuronCores(h Host) []Finding {
	held := procfs.Holders(h.Proc, func(target string) bool {
		rest, ok := strings.CutPrefix(target, "/dev/neuron")
		_, err := strconv.Atoi(rest)
		return ok && err == nil
	})
	var out []Finding
	for dev, pids := range held {
		for _, pid := range pids {
			if pid == os.Getpid() {
				continue
			}
			out = append(out, Finding{Check: "neuron", Problem: fmt.Sprintf("%s is held by pid %d (%s)", dev, pid, procfs.CommandLine(h.Proc, pid)),
				Fix: fmt.Sprintf("stop it (kill %d; a finished job's orphan keeps the cores) or give this job other cores with NEURON_RT_VISIBLE_CORES", pid)})
		}
	}
	return out
}
