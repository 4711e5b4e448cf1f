package launch

import (
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
)

// DryRun prints what Run would do: every setting with where it came from,
// and the environment each local worker would get (the master address and
// the global ranks as far as they are known before the rendezvous).
func DryRun(w io.Writer, c Config, environ []string) {
	fmt.Fprintln(w, "ddprun --dry_run: settings (source)")
	row := func(name string, v any) {
		src := c.Sources[name]
		if src == "" {
			src = "default"
		}
		fmt.Fprintf(w, "  %-18s %-28v (%s)\n", name, v, src)
	}
	row("nnodes", c.nodesWanted())
	row("nproc_per_node", c.NProcPerNode)
	row("node_rank", c.NodeRank)
	row("master_addr", orLocal(c.MasterAddr))
	row("master_port", c.MasterPort)
	row("rdzv_backend", c.RdzvBackend)
	row("rdzv_endpoint", c.RdzvEndpoint)
	row("rdzv_id", c.RdzvID)
	row("max_restarts", c.MaxRestarts)
	row("restart_on_peer_loss", c.RestartOnPeerLoss)
	row("monitor_interval", c.MonitorInterval)
	row("compile_only", c.CompileOnly)
	row("timeout", c.Timeout)
	row("stall_warn", c.StallWarn)
	row("backend", c.Transport)
	fmt.Fprintf(w, "  %-18s %q %q\n", "program", c.Program, c.Args)
	for _, note := range c.Notes {
		fmt.Fprintf(w, "note: %s\n", note)
	}
	if c.Transport == backendMPI {
		if err := checkMPI(c); err != nil {
			fmt.Fprintf(w, "error: %v\n", err)
			return
		}
		args, added := mpirunCommand(c, environ, 0)
		slices.Sort(added)
		fmt.Fprintf(w, "workers: started by %q, MPI giving the ranks; their environment adds %v\n", args, added)
		return
	}
	node := max(c.NodeRank, 0)
	a := assignment{node: node, nnodes: c.NNodesMax, offset: node * c.NProcPerNode, world: c.NNodesMax * c.NProcPerNode,
		master: net.JoinHostPort(orLocal(c.MasterAddr), strconv.Itoa(c.MasterPort))}
	if c.NodeRank < 0 && c.NNodesMax > 1 {
		fmt.Fprintln(w, "worker environments (node rank assigned at the rendezvous; shown as node 0):")
	} else {
		fmt.Fprintln(w, "worker environments (the master port is chosen at the rendezvous unless given):")
	}
	spec := workerSpec{cfg: c, node: a.node, offset: a.offset, world: a.world, master: a.master, env: environ}
	for lr := range c.NProcPerNode {
		host, port, _ := net.SplitHostPort(a.master)
		env := workerEnv(c, spec, lr, a.offset+lr, host, port)
		slices.Sort(env)
		fmt.Fprintf(w, "  local rank %d: %v\n", lr, env)
	}
}
