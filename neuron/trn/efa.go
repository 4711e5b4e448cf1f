package trn

import (
	"fmt"
	"path/filepath"
)

// unlimited is RLIM_INFINITY.
const unlimited = ^uint64(0)

// EFAProblems checks what a job over nodes of a Trainium instance needs
// of EFA on this host: the devices (sysDir's class/infiniband, which the
// EFA driver fills with rdmap*), FI_PROVIDER left to efa, and a memlock
// limit (memlock, nil when unknown) under which the provider can pin the
// buffers it sends. A single-node job needs none of it.
func EFAProblems(inst Instance, nodes int, getenv func(string) string, sysDir string, memlock func() (uint64, error)) []Problem {
	if nodes < 2 {
		return nil
	}
	var out []Problem
	if devs, _ := filepath.Glob(filepath.Join(sysDir, "class/infiniband/*")); len(devs) == 0 {
		out = append(out, Problem{Check: "efa", What: fmt.Sprintf("this %s has no EFA device (%s/class/infiniband is empty)", inst.Type, sysDir),
			Fix: "launch the instances with their EFA interfaces (and the aws-efa-installer driver); nodes cannot reach each other's NeuronCores without"})
	}
	if p := getenv(EnvFIProvider); p != "" && p != "efa" {
		out = append(out, Problem{Check: "efa", What: fmt.Sprintf("%s=%s on a %d-node Trainium job", EnvFIProvider, p, nodes),
			Fix: fmt.Sprintf("unset it (ddprun sets %s=efa and %s=1 across nodes) or export %s=efa", EnvFIProvider, EnvFIEFAUseDeviceRDMA, EnvFIProvider)})
	}
	if memlock != nil {
		if lim, err := memlock(); err == nil && lim != unlimited {
			out = append(out, Problem{Check: "memlock", What: fmt.Sprintf("the memlock limit is %d KiB; EFA pins every buffer it sends", lim>>10),
				Fix: "ulimit -l unlimited before ddprun (LimitMEMLOCK=infinity in a systemd unit, --ulimit memlock=-1 in docker)"})
		}
	}
	return out
}
