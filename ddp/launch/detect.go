package launch

import (
	"bufio"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/xladdp/xladdp/ddp/launch/internal/nodelist"
	"github.com/xladdp/xladdp/internal/quote"
	"github.com/xladdp/xladdp/internal/workerenv"
)

// Detect fills what the command line (and PET_ variables) left out from
// the cluster's environment: SageMaker, SLURM, PBS, or a Kubeflow
// PyTorchJob's MASTER_ADDR/MASTER_PORT, in that order. Each value it sets
// is recorded in c.Sources with the variable it came from. A malformed
// value is an error naming the variable.
func Detect(c *Config, getenv func(string) string) error {
	given := func(name string) bool { _, ok := c.Sources[name]; return ok }
	set := func(name, source string, apply func()) {
		if !given(name) {
			apply()
			c.Sources[name] = source
		}
	}
	var hosts []string
	var node int
	var source string
	switch {
	case getenv("SM_HOSTS") != "":
		source = "SageMaker"
		if err := checkSageMakerHosts(getenv("SM_HOSTS"), &hosts); err != nil {
			return fmt.Errorf("$SM_HOSTS=%s: %w", quote.Short(getenv("SM_HOSTS")), err)
		}
		current := getenv("SM_CURRENT_HOST")
		node = slices.Index(hosts, current)
		if node < 0 {
			return fmt.Errorf("$SM_CURRENT_HOST=%s is not in $SM_HOSTS", quote.Short(current))
		}
		devices := false
		for _, env := range []string{"SM_NUM_GPUS", "SM_NUM_NEURONS"} {
			if v := getenv(env); v != "" {
				n, err := strconv.Atoi(v)
				if err != nil || n < 0 {
					return fmt.Errorf("$%s=%s: want a device count", env, quote.Short(v))
				}
				if n > 0 {
					set("nproc_per_node", "$"+env, func() { c.NProcPerNode = n })
					devices = true
					break
				}
			}
		}
		if !devices && !given("nproc_per_node") {
			c.Notes = append(c.Notes, fmt.Sprintf("SageMaker gives no GPUs or NeuronCores here (SM_NUM_GPUS=%s): "+
				"one worker per host; for more on a CPU instance set PET_NPROC_PER_NODE (e.g. to $SM_NUM_CPUS)",
				cmp.Or(getenv("SM_NUM_GPUS"), "unset")))
		}
	case getenv("SLURM_JOB_NODELIST") != "" || getenv("SLURM_NODELIST") != "":
		source = "SLURM"
		env := "SLURM_JOB_NODELIST"
		if getenv(env) == "" {
			env = "SLURM_NODELIST"
		}
		var err error
		if hosts, err = nodelist.Expand(getenv(env)); err != nil {
			return fmt.Errorf("$%s=%s: %w", env, quote.Short(getenv(env)), err)
		}
		if v := getenv("SLURM_NNODES"); v != "" {
			if n, err := strconv.Atoi(v); err != nil || n != len(hosts) {
				return fmt.Errorf("$SLURM_NNODES=%q disagrees with the %d hosts of $%s", v, len(hosts), env)
			}
		}
		v := getenv("SLURM_NODEID")
		if node, err = strconv.Atoi(v); err != nil || node < 0 || node >= len(hosts) {
			return fmt.Errorf("$SLURM_NODEID=%q: want a node index below %d", v, len(hosts))
		}
		if id := getenv("SLURM_JOB_ID"); id != "" {
			set("rdzv_id", "$SLURM_JOB_ID", func() { c.RdzvID = id })
		}
	case getenv("PBS_NODEFILE") != "":
		source = "PBS"
		var err error
		if hosts, err = readNodeFile(getenv("PBS_NODEFILE")); err != nil {
			return fmt.Errorf("$PBS_NODEFILE=%q: %w", getenv("PBS_NODEFILE"), err)
		}
		me, _ := os.Hostname()
		node = indexOfHost(hosts, me)
		if node < 0 {
			return fmt.Errorf("$PBS_NODEFILE lists %v, which does not include this host %q", hosts, me)
		}
		if id := getenv("PBS_JOBID"); id != "" {
			set("rdzv_id", "$PBS_JOBID", func() { c.RdzvID = id })
		}
	default:
		// Kubeflow's PyTorchJob: PET_* (already read) and MASTER_ADDR/PORT.
		if v := getenv(workerenv.MasterAddr); v != "" {
			set("master_addr", "$MASTER_ADDR", func() { c.MasterAddr = v })
		}
		if v := getenv(workerenv.MasterPort); v != "" && !given("master_port") {
			p, err := strconv.Atoi(v)
			if err != nil || p < 1 || p > 65535 {
				return fmt.Errorf("$MASTER_PORT=%q: want a port from 1 to 65535", v)
			}
			set("master_port", "$MASTER_PORT", func() { c.MasterPort = p })
		}
		return nil
	}
	set("nnodes", source+" host list", func() { c.NNodesMin, c.NNodesMax = len(hosts), len(hosts) })
	set("node_rank", source+" current host", func() { c.NodeRank = node })
	if c.RdzvBackend == "static" && !given("rdzv_endpoint") {
		set("master_addr", source+" first host", func() { c.MasterAddr = hosts[0] })
	}
	if c.RdzvBackend == "c10d" && !given("rdzv_endpoint") {
		set("rdzv_endpoint", source+" first host", func() { c.RdzvEndpoint = hosts[0] + ":" + strconv.Itoa(c.MasterPort) })
	}
	return nil
}

// indexOfHost finds host in hosts, also by short name (PBS lists fully
// qualified names, hostname may not be, or the other way round).
func indexOfHost(hosts []string, host string) int {
	short := func(h string) string { s, _, _ := strings.Cut(h, "."); return s }
	for i, h := range hosts {
		if h == host || short(h) == short(host) {
			return i
		}
	}
	return -1
}

// readNodeFile reads a PBS node file: one host per line, repeated once per
// slot; the distinct hosts in order of first appearance.
func readNodeFile(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var hosts []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		h := strings.TrimSpace(sc.Text())
		if h != "" && !slices.Contains(hosts, h) {
			hosts = append(hosts, h)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(hosts) == 0 {
		return nil, fmt.Errorf("no hosts in %s", path)
	}
	return hosts, nil
}

// checkSageMakerHosts reads $SM_HOSTS: a JSON list of distinct, non-empty
// host names.
func checkSageMakerHosts(v string, hosts *[]string) error {
	if err := json.Unmarshal([]byte(v), hosts); err != nil {
		return fmt.Errorf("want a JSON list of host names, e.g. [\"algo-1\",\"algo-2\"]: %w", err)
	}
	if len(*hosts) == 0 {
		return errors.New("an empty list: want the job's host names, e.g. [\"algo-1\",\"algo-2\"]")
	}
	seen := map[string]bool{}
	for _, h := range *hosts {
		if strings.TrimSpace(h) == "" {
			return errors.New("an empty host name")
		}
		if seen[h] {
			return fmt.Errorf("the host %s is listed twice", quote.Short(h))
		}
		seen[h] = true
	}
	return nil
}
