package launch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/xladdp/xladdp/ddp/internal/transport"

	"github.com/xladdp/xladdp/ddp/launch/internal/preflight"
	"github.com/xladdp/xladdp/internal/knobs"
)

// Doctor runs the checks of `ddprun doctor` for job c on this node and,
// for a job of several nodes, compares this node with the others (each
// runs `ddprun doctor` with the same options), all within 5 s. It prints each finding with
// what to do and returns 0 when there is none, 1 otherwise.
func Doctor(ctx context.Context, c Config, environ []string, out io.Writer) int {
	ctx, cancel := context.WithTimeout(ctx, doctorWait)
	defer cancel()
	host := preflight.ThisHost()
	findings := localFindings(ctx, c, environ, host)
	unreachable := slices.ContainsFunc(findings, func(f preflight.Finding) bool { return f.Check == "master_addr" })
	if c.NNodesMax > 1 && !unreachable {
		findings = append(findings, compareNodes(ctx, c, environ)...)
	}
	host.Getenv = lookupIn(environ)
	if sdk, _ := preflight.NeuronSDK(host); sdk != "" {
		fmt.Fprintf(out, "ddprun doctor: %s\n", sdk)
	}
	for _, f := range findings {
		fmt.Fprintf(out, "ddprun doctor: %s\n", f)
	}
	if len(findings) > 0 {
		fmt.Fprintf(out, "ddprun doctor: %d problem(s) found\n", len(findings))
		return 1
	}
	fmt.Fprintln(out, "ddprun doctor: no problem found")
	return 0
}

// localFindings are the checks of this node alone (--check runs them
// before a launch).
func localFindings(ctx context.Context, c Config, environ []string, h preflight.Host) []preflight.Finding {
	h.Getenv = lookupIn(environ)
	job := preflight.Job{NProcPerNode: c.NProcPerNode, NNodes: c.NNodesMax, MasterAddr: c.MasterAddr, ShmMiB: shmMiB(h.Getenv)}
	if _, given := c.Sources["master_port"]; given {
		job.MasterPort = c.MasterPort
	}
	var out []preflight.Finding
	for _, err := range knobs.Problems(h.Getenv) {
		fix := "every worker would stop at start with this value: fix it, or unset it for the default"
		if errors.Is(err, knobs.ErrMisread) {
			fix = "the workers would silently take the default: fix it, or unset it"
		}
		out = append(out, preflight.Finding{Check: "environment", Problem: err.Error(), Fix: fix})
	}
	if c.Program != "" {
		if err := checkProgram(c.Program); err != nil {
			out = append(out, preflight.Finding{Check: "program", Problem: err.Error()})
		}
	}
	// A single node's master port is the workers' store; across nodes
	// node 0's agent holds it (static rendezvous), so only it can check.
	if job.MasterPort != 0 && (c.NNodesMax == 1 || c.NodeRank == 0) && isLocal(orLocal(c.MasterAddr)) {
		if f := preflight.PortFree(h.Proc, job.MasterPort, fmt.Sprintf("--master_port=%d", job.MasterPort),
			"pick another port, or leave --master_port unset on one node (ddprun picks a free one)"); f != nil {
			out = append(out, *f)
		}
	}
	out = append(out, preflight.MasterAddr(ctx, job, func(host string) bool { return isLocal(host) })...)
	out = append(out, preflight.ShmSpace(h, job)...)
	out = append(out, preflight.EFA(h, job)...)
	_, sdk := preflight.NeuronSDK(h)
	out = append(out, sdk...)
	return append(out, preflight.NeuronCores(h)...)
}

// shmMiB is the shared-memory slot $XLADDP_SHM_MIB gives each rank (0
// when the path is off; the default when the variable is malformed,
// which the workers refuse themselves).
func shmMiB(getenv func(string) string) int {
	n, _ := transport.SlotMiB(getenv)
	return n
}

// lookupIn reads a variable from environ (the last setting wins, as for
// exec).
func lookupIn(environ []string) func(string) string {
	return func(name string) string {
		for _, kv := range slices.Backward(environ) {
			if k, v, ok := strings.Cut(kv, "="); ok && k == name {
				return v
			}
		}
		return ""
	}
}
