package launch

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
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
	raw, _ := json.Marshal(me)
	claim := fmt.Sprintf("doctor/claim/%d", c.NodeRank)
	n, err := client.Add(ctx, claim, 1)
	if err != nil {
		return fail("posting to", err)
	}
	if n == 1 {
		err = client.Set(ctx, fmt.Sprintf("doctor/report/%d", c.NodeRank), raw)
	}
	if err != nil {
		return fail("posting to", err)
	}
	reports, missing := gatherReports(ctx, client, c.NNodesMax)
	var out []preflight.Finding
	if total, err := client.Add(ctx, claim, 0); err == nil && total > 1 {
		out = append(out, preflight.Finding{Check: "node_rank", Problem: fmt.Sprintf("%d nodes run with --node_rank=%d", total, c.NodeRank),
			Fix: "give each node its own --node_rank, 0 to --nnodes-1 (or use --rdzv_backend=c10d, which numbers them)"})
	}
	if len(missing) > 0 {
		out = append(out, preflight.Finding{Check: "nodes", Problem: fmt.Sprintf("node(s) %v did not report within %v", missing, doctorWait),
			Fix: "run ddprun doctor on every node with the same --nnodes, --master_addr and --master_port"})
	}
	out = append(out, differences(me, reports)...)
	// Node 0 hosts the meeting: it stays until every node has read.
	_, _ = client.Add(ctx, "doctor/done", 1)
	if c.NodeRank == 0 {
		for ctx.Err() == nil {
			if done, err := client.Add(ctx, "doctor/done", 0); err != nil || done >= int64(c.NNodesMax) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return out
}

// gatherReports reads every node's report, waiting for them until ctx
// ends; missing are the node ranks that did not post one.
func gatherReports(ctx context.Context, client *store.Client, nnodes int) (reports []nodeReport, missing []int) {
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
	_ = client.Wait(wait, keys...)
	have, _ := client.Check(ctx, keys...)
	for r, key := range keys {
		if r >= len(have) || !have[r] {
			missing = append(missing, r)
			continue
		}
		raw, err := client.Get(ctx, key)
		var rep nodeReport
		if err != nil || len(raw) > maxReport || json.Unmarshal(raw, &rep) != nil {
			missing = append(missing, r)
			continue
		}
		reports = append(reports, rep)
	}
	return reports, missing
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
