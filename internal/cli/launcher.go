package cli

import (
	"fmt"
	"strings"
)

// launcherOptions are ddprun's (torchrun's) options a program is likely
// to be given by mistake, after its name instead of before it.
var launcherOptions = []string{"nproc_per_node", "nnodes", "node_rank", "master_addr", "master_port", "rdzv_backend",
	"rdzv_endpoint", "rdzv_id", "rdzv_conf", "standalone", "max_restarts", "local_ranks_filter", "compile_only"}

// MisplacedLauncherOption says, for a program's command line args, that
// an option it does not define (defined reports which it does) is
// ddprun's, given after the program: everything after the program's name
// is the program's own. nil when there is none.
func MisplacedLauncherOption(args []string, defined func(name string) bool) error {
	for _, a := range args {
		if a == "--" {
			return nil
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "--") || defined(name) {
			continue
		}
		normal := strings.ReplaceAll(name, "-", "_")
		for _, o := range launcherOptions {
			if normal == o {
				return fmt.Errorf("%s is ddprun's (torchrun's) option, given after the program: ddprun's options go "+
					"before the program's name and the program's after it (ddprun %s PROGRAM ...)", a, a)
			}
		}
	}
	return nil
}
