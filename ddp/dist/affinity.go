package dist

import (
	"fmt"
	"os"
	"runtime"
	"strconv"

	"github.com/xladdp/xladdp/internal/workerenv"
	"golang.org/x/sys/unix"
)

// EnvBindCPUs ("1") sets Options.BindCPUs.
const EnvBindCPUs = workerenv.BindCPUs

// bindLocalCPUs gives this process, local rank localRank of
// localWorldSize on its host, its own share of the CPUs it may run on:
// the cpus are split into localWorldSize contiguous runs and every thread
// of the process (the XLA CPU runtime's included, whether started before
// or after) is bound to run localRank. Ranks that share a host otherwise
// each size their thread pools to every core and contend for them, as
// torchrun's OMP_NUM_THREADS=1 avoids for PyTorch. Fewer CPUs than ranks
// leaves the process unbound. The Go scheduler is narrowed to the share
// too: with GOMAXPROCS still at the host's count, its spare Ps spin on
// the one core beside the XLA runtime's threads (the seed's 2-rank MNIST
// job ran 25% slower).
func bindLocalCPUs(localRank, localWorldSize int) error {
	if localWorldSize < 2 || localRank < 0 || localRank >= localWorldSize {
		return nil
	}
	var allowed unix.CPUSet
	if err := unix.SchedGetaffinity(0, &allowed); err != nil {
		return fmt.Errorf("ddp: reading this process's CPU affinity: %w", err)
	}
	var cpus []int
	for c := range 1024 {
		if allowed.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	if len(cpus) < localWorldSize {
		return nil
	}
	var mine unix.CPUSet
	share := cpus[localRank*len(cpus)/localWorldSize : (localRank+1)*len(cpus)/localWorldSize]
	for _, c := range share {
		mine.Set(c)
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return fmt.Errorf("ddp: listing this process's threads to bind them: %w", err)
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		// A thread that exited since the listing is no loss.
		if err := unix.SchedSetaffinity(tid, &mine); err != nil && err != unix.ESRCH {
			return fmt.Errorf("ddp: binding thread %d to CPUs %v: %w", tid, cpus, err)
		}
	}
	runtime.GOMAXPROCS(len(share))
	return nil
}

// boundCPUs returns the CPUs this thread may run on (for tests and logs).
func boundCPUs() []int {
	var set unix.CPUSet
	if unix.SchedGetaffinity(0, &set) != nil {
		return nil
	}
	var out []int
	for c := range 1024 {
		if set.IsSet(c) {
			out = append(out, c)
		}
	}
	return out
}
