package launch

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/xladdp/xladdp/ddp/launch/internal/preflight"
	"github.com/xladdp/xladdp/ddp/store"
	"github.com/xladdp/xladdp/neuron/trn"
)

// doctorWait bounds `ddprun doctor`, the nodes' meeting included, so the
// whole command answers within 5 s.
const doctorWait = 4500 * time.Millisecond

// nodeReport is what each node's doctor tells the others.
type nodeReport struct {
	NodeRank int
	Host     string
	// Program and Plugin are the sha256 of the training binary and of
	// $XLADDP_PJRT_PLUGIN ("" when unset).
	Program, Plugin string
	// Packages are the versions of the PJRT plugins' and the Neuron
	// compiler's Python packages found here (name → version).
	Packages map[string]string
}

// readMargin is what a doctor keeps of its time to read the reports.
const readMargin = time.Second

// maxReport bounds a node's report as read back from the store.
const maxReport = 64 << 10

// compareNodes meets the other nodes' doctors at --master_addr:--master_port
// (node 0 hosts the meeting) before ctx ends and compares them with
// this one: a node rank given twice, a node that never came, a different
// training binary, PJRT plugin or compiler.
func compareNodes(ctx context.Context, c Config, environ []string) []preflight.Finding {
	getenv := lookupIn(environ)
	token := getenv(store.EnvToken)
	addr := net.JoinHostPort(orLocal(c.MasterAddr), strconv.Itoa(c.MasterPort))
	fail := func(what string, err error) []preflight.Finding {
		return []preflight.Finding{{Check: "nodes", Problem: fmt.Sprintf("cannot compare the nodes: %s %s: %v", what, addr, err),
			Fix: "run ddprun doctor on every node with the same --nnodes, --master_addr and --master_port, node 0 first"}}
	}
	if c.NodeRank == 0 {
		srv, err := store.Listen(addr, token)
		if err != nil {
			return fail("hosting the meeting at", err)
		}
		defer srv.Close()
	}
	client, err := store.Dial(ctx, addr, token)
	if err != nil {
		return fail("reaching the meeting at", err)
	}
	defer client.Close()
	me := describeNode(c, getenv)
	if err := postReport(ctx, client, me); err != nil {
		return fail("posting to", err)
	}
	reports, missing, err := gatherReports(ctx, client, c.NNodesMax)
	if err != nil {
		return fail("reading the reports at", err)
	}
	claimed, err := client.Add(ctx, claimKey(c.NodeRank), 0)
	if err != nil {
		return fail("reading who claimed node rank "+strconv.Itoa(c.NodeRank)+" at", err)
	}
	out := nodeFindings(c, claimed, missing, doctorWait)
	out = append(out, differences(me, reports)...)
	if err := sayGoodbye(ctx, client, c); err != nil {
		return append(out, fail("leaving", err)...)
	}
	return out
}

// claimKey counts the nodes that claimed node rank: more than one is a
// finding.
func claimKey(rank int) string { return fmt.Sprintf("doctor/claim/%d", rank) }

// postReport claims me's node rank and, the first to, posts its report.
func postReport(ctx context.Context, client *store.Client, me nodeReport) error {
	raw, err := json.Marshal(me)
	if err != nil {
		return err
	}
	n, err := client.Add(ctx, claimKey(me.NodeRank), 1)
	if err == nil && n == 1 {
		err = client.Set(ctx, fmt.Sprintf("doctor/report/%d", me.NodeRank), raw)
	}
	if err != nil {
		return fmt.Errorf("node %d's report: %w", me.NodeRank, err)
	}
	return nil
}

// nodeFindings are a node rank given twice and the nodes that never
// reported.
func nodeFindings(c Config, claimed int64, missing []int, within time.Duration) []preflight.Finding {
	var out []preflight.Finding
	if claimed > 1 {
		out = append(out, preflight.Finding{Check: "node_rank", Problem: fmt.Sprintf("%d nodes run with --node_rank=%d", claimed, c.NodeRank),
			Fix: "give each node its own --node_rank, 0 to --nnodes-1 (or use --rdzv_backend=c10d, which numbers them)"})
	}
	if len(missing) > 0 {
		out = append(out, preflight.Finding{Check: "nodes", Problem: fmt.Sprintf("node(s) %v did not report within %v", missing, within),
			Fix: "run ddprun doctor on every node with the same --nnodes, --master_addr and --master_port"})
	}
	return out
}

// sayGoodbye tells the meeting this node has read; node 0, which hosts
// it, stays until every node has, or ctx ends.
func sayGoodbye(ctx context.Context, client *store.Client, c Config) error {
	if _, err := client.Add(ctx, "doctor/done", 1); err != nil {
		return fmt.Errorf("node %d saying it has read: %w", c.NodeRank, err)
	}
	for c.NodeRank == 0 && ctx.Err() == nil {
		done, err := client.Add(ctx, "doctor/done", 0)
		if err != nil && ctx.Err() == nil {
			return fmt.Errorf("node 0 waiting for the %d nodes to read: %w", c.NNodesMax, err)
		}
		if err != nil || done >= int64(c.NNodesMax) {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// gatherReports reads every node's report, waiting for them until ctx
// ends; missing are the node ranks that did not post one (or posted one
// that is not a report).
func gatherReports(ctx context.Context, client *store.Client, nnodes int) (reports []nodeReport, missing []int, err error) {
	keys := make([]string, nnodes)
	for r := range keys {
		keys[r] = fmt.Sprintf("doctor/report/%d", r)
	}
	// Stop waiting a moment before ctx ends, to read and say goodbye
	// while node 0 still hosts the meeting.
	wait := ctx
	if deadline, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		wait, cancel = context.WithDeadline(ctx, deadline.Add(-readMargin))
		defer cancel()
	}
	// A node missing at the deadline is a finding, not an error.
	if err := client.Wait(wait, keys...); err != nil && !errors.Is(err, store.ErrTimeout) && wait.Err() == nil {
		return nil, nil, fmt.Errorf("waiting for nodes' reports: %w", err)
	}
	have, err := client.Check(ctx, keys...)
	if err != nil {
		return nil, nil, fmt.Errorf("looking for nodes' reports: %w", err)
	}
	for r, key := range keys {
		if !have[r] {
			missing = append(missing, r)
			continue
		}
		raw, err := client.Get(ctx, key)
		if err != nil {
			return nil, nil, fmt.Errorf("reading node %d's report: %w", r, err)
		}
		var rep nodeReport
		if len(raw) > maxReport || json.Unmarshal(raw, &rep) != nil {
			missing = append(missing, r)
			continue
		}
		reports = append(reports, rep)
	}
	return reports, missing, nil
}

// differences names each node whose binary, plugin or packages differ
// from this node's.
func differences(me nodeReport, reports []nodeReport) []preflight.Finding {
	var out []preflight.Finding
	for _, r := range reports {
		if r.NodeRank == me.NodeRank {
			continue
		}
		there := fmt.Sprintf("node %d (%s)", r.NodeRank, r.Host)
		if r.Program != me.Program {
			out = append(out, preflight.Finding{Check: "program", Problem: fmt.Sprintf("%s runs another training binary (sha256 %s; here %s)",
				there, short(r.Program), short(me.Program)), Fix: "copy the same build to every node"})
		}
		if r.Plugin != me.Plugin {
			out = append(out, preflight.Finding{Check: "plugin", Problem: fmt.Sprintf("%s loads another PJRT plugin ($XLADDP_PJRT_PLUGIN sha256 %s; here %s)",
				there, short(r.Plugin), short(me.Plugin)), Fix: "install the same plugin on every node"})
		}
		for _, name := range unionKeys(r.Packages, me.Packages) {
			if r.Packages[name] != me.Packages[name] {
				out = append(out, preflight.Finding{Check: "plugin", Problem: fmt.Sprintf("%s has %s %q; here %q",
					there, name, r.Packages[name], me.Packages[name]), Fix: "install the same versions on every node (the compiled programs differ otherwise)"})
			}
		}
	}
	return out
}

func unionKeys(a, b map[string]string) []string {
	var keys []string
	for _, m := range []map[string]string{a, b} {
		for k := range m {
			if !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
	}
	slices.Sort(keys)
	return keys
}

func short(hash string) string {
	if hash == "" {
		return "none"
	}
	return hash[:min(12, len(hash))]
}

// describeNode is this node's report.
func describeNode(c Config, getenv func(string) string) nodeReport {
	host, _ := os.Hostname()
	r := nodeReport{NodeRank: c.NodeRank, Host: host, Packages: pluginPackages()}
	if c.Program != "" {
		if path, err := exec.LookPath(c.Program); err == nil {
			r.Program = fileHash(path)
		}
	}
	if p := getenv("XLADDP_PJRT_PLUGIN"); p != "" {
		r.Plugin = fileHash(p)
	}
	return r
}

// fileHash is path's sha256, or "unreadable".
func fileHash(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return "unreadable"
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "unreadable"
	}
	return hex.EncodeToString(h.Sum(nil))
}

// pluginDists are the Python distributions whose versions must agree
// across nodes: the PJRT plugins and the Neuron compiler.
var pluginDists = []string{"libneuronxla", "neuronx_cc", "lammps_jax_pjrt_cpu", "jax_cuda12_pjrt", "jax_cuda13_pjrt"}

// pluginPackages finds pluginDists' versions in the usual site-packages
// directories.
func pluginPackages() map[string]string {
	home, _ := os.UserHomeDir()
	var dirs []string
	for _, pattern := range []string{"/opt/aws_neuronx_venv*/lib/python3*/site-packages", "/usr/local/lib/python3*/dist-packages",
		"/usr/lib/python3/dist-packages", filepath.Join(home, ".local/lib/python3*/site-packages")} {
		found, _ := filepath.Glob(pattern)
		dirs = append(dirs, found...)
	}
	return packagesIn(dirs)
}

// packagesIn is the newest version of each of pluginDists that dirs'
// dist-info directories name, compared as numbers: "2.10.0" is newer
// than "2.9.0", which a string compare puts after it.
func packagesIn(dirs []string) map[string]string {
	out := map[string]string{}
	for _, d := range dirs {
		for _, dist := range pluginDists {
			infos, _ := filepath.Glob(filepath.Join(d, dist+"-*.dist-info"))
			for _, info := range infos {
				v := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(info), dist+"-"), ".dist-info")
				if old, ok := out[dist]; !ok || trn.VersionLess(old, v) {
					out[dist] = v
				}
			}
		}
	}
	return out
}
