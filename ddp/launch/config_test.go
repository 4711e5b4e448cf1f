package launch

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func noEnv(string) string { return "" }

func envOf(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }

// TestParseArgsEveryFlag: every torchrun option, in - and _ spellings and
// from PET_ variables, lands in the config; the training binary and its
// arguments are kept apart (its own flags are not ddprun's).
func TestParseArgsEveryFlag(t *testing.T) {
	c, err := ParseArgs([]string{"--nnodes=2:4", "--nproc-per-node", "3", "--node_rank=1", "--master_addr=10.0.0.1",
		"--master-port=2020", "--rdzv_backend=c10d", "--rdzv_endpoint=h:29400", "--rdzv-id=job", "--rdzv_conf=timeout=30,join_timeout=5,read_timeout=60",
		"--standalone", "--max_restarts=2", "--monitor_interval=0.5", "--log_dir=" + t.TempDir(), "--redirects=0:1,2:3", "--tee=1",
		"--local_ranks_filter=0,2", "--role=trainer", "--no_python", "--run_path=x", "--compile-only", "./train", "--epochs", "3", "--nnodes=9"}, noEnv, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 2, c.NNodesMin)
	assert.Equal(t, 4, c.NNodesMax)
	assert.Equal(t, 3, c.NProcPerNode)
	assert.Equal(t, 1, c.NodeRank)
	assert.Equal(t, "10.0.0.1", c.MasterAddr)
	assert.Equal(t, 2020, c.MasterPort)
	assert.Equal(t, "c10d", c.RdzvBackend)
	assert.Equal(t, "h:29400", c.RdzvEndpoint)
	assert.Equal(t, "job", c.RdzvID)
	assert.Equal(t, 30*time.Second, c.RdzvTimeout)
	assert.Equal(t, 5*time.Second, c.JoinTimeout)
	assert.True(t, c.Standalone)
	assert.Equal(t, 2, c.MaxRestarts)
	assert.Equal(t, 500*time.Millisecond, c.MonitorInterval)
	assert.Equal(t, map[int]int{0: 1, 2: 3}, c.Redirects)
	assert.Equal(t, map[int]int{0: 1, 1: 1, 2: 1}, c.Tee)
	assert.Equal(t, map[int]bool{0: true, 2: true}, c.LocalRanksFilter)
	assert.Equal(t, "trainer", c.Role)
	assert.True(t, c.CompileOnly)
	assert.Equal(t, "./train", c.Program)
	assert.Equal(t, []string{"--epochs", "3", "--nnodes=9"}, c.Args)
	assert.Equal(t, "--nproc_per_node", c.Sources["nproc_per_node"])
}

// TestParseArgsFromPET: Kubeflow's PyTorchJob configures torchrun with
// PET_ variables; a flag on the command line wins.
func TestParseArgsFromPET(t *testing.T) {
	env := envOf(map[string]string{"PET_NNODES": "3", "PET_NPROC_PER_NODE": "2", "PET_NODE_RANK": "2", "PET_MASTER_ADDR": "pod-0",
		"PET_MASTER_PORT": "23456", "PET_RDZV_BACKEND": "c10d", "PET_RDZV_ENDPOINT": "pod-0:29400", "PET_RDZV_ID": "pj",
		"PET_MAX_RESTARTS": "1", "PET_MONITOR_INTERVAL": "1", "PET_ROLE": "r", "PET_STANDALONE": "false", "PET_RDZV_CONF": "timeout=7",
		"PET_COMPILE_ONLY": "true"})
	c, err := ParseArgs([]string{"--nproc_per_node=4", "./train"}, env, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 3, c.NNodesMax)
	assert.Equal(t, 4, c.NProcPerNode, "the command line wins")
	assert.Equal(t, 2, c.NodeRank)
	assert.Equal(t, "pod-0", c.MasterAddr)
	assert.Equal(t, 23456, c.MasterPort)
	assert.Equal(t, "c10d", c.RdzvBackend)
	assert.Equal(t, "pod-0:29400", c.RdzvEndpoint)
	assert.Equal(t, "pj", c.RdzvID)
	assert.Equal(t, 1, c.MaxRestarts)
	assert.Equal(t, time.Second, c.MonitorInterval)
	assert.Equal(t, 7*time.Second, c.RdzvTimeout)
	assert.Equal(t, "r", c.Role)
	assert.True(t, c.CompileOnly)
	assert.Equal(t, "$PET_NNODES", c.Sources["nnodes"])
}

// TestParseArgsRefusesBadValues: each bad value is an error naming the
// option and saying what it wants.
func TestParseArgsRefusesBadValues(t *testing.T) {
	cases := []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{}, nil, "no training binary"},
		{[]string{"--nnodes=0", "x"}, nil, "--nnodes"},
		{[]string{"--nnodes=3:2", "x"}, nil, "--nnodes"},
		{[]string{"--nnodes=a", "x"}, nil, "--nnodes"},
		{[]string{"--nproc_per_node=0", "x"}, nil, "--nproc_per_node"},
		{[]string{"--nproc_per_node=many", "x"}, nil, "--nproc_per_node"},
		{[]string{"--nproc_per_node=99999", "x"}, nil, "--nproc_per_node"},
		{[]string{"--node_rank=-2", "x"}, nil, "--node_rank"},
		{[]string{"--master_port=70000", "x"}, nil, "--master_port"},
		{[]string{"--rdzv_backend=etcd", "x"}, nil, "--rdzv_backend"},
		{[]string{"--rdzv_conf=timeout", "x"}, nil, "--rdzv_conf"},
		{[]string{"--rdzv_conf=timeout=-1", "x"}, nil, "--rdzv_conf"},
		{[]string{"--rdzv_conf=colour=red", "x"}, nil, "unknown setting"},
		{[]string{"--max_restarts=-1", "x"}, nil, "--max_restarts"},
		{[]string{"--monitor_interval=0", "x"}, nil, "--monitor_interval"},
		{[]string{"--redirects=4", "x"}, nil, "--redirects"},
		{[]string{"--redirects=1", "x"}, nil, "give --log_dir"},
		{[]string{"--tee=0:9", "x"}, nil, "--tee"},
		{[]string{"--nproc_per_node=2", "--local_ranks_filter=5", "x"}, nil, "--local_ranks_filter"},
		{[]string{"--module", "x"}, nil, "starts binaries"},
		{[]string{"--bogus", "x"}, nil, "unknown flag"},
		{[]string{"x"}, map[string]string{"PET_NNODES": "lots"}, "$PET_NNODES"},
		{[]string{"x"}, map[string]string{"PET_COMPILE_ONLY": "maybe"}, "$PET_COMPILE_ONLY"},
		{[]string{"--compile_only=sometimes", "x"}, nil, "compile_only"},
		{[]string{"--nproc_per_node=neuron", "x"}, map[string]string{"NEURON_NUM_DEVICES": "zero"}, "$NEURON_NUM_DEVICES"},
	}
	for _, c := range cases {
		_, err := ParseArgs(c.args, envOf(c.env), io.Discard)
		assert.ErrorContains(t, err, c.want, "%v %v", c.args, c.env)
	}
}

// TestDurationsRefuseNonsense: every duration ddprun takes, from a flag
// or a PET_ variable, refuses NaN, the infinities, 0, negatives, values
// that round to less than a millisecond and huge ones with a message
// (--monitor_interval=NaN or 1e-300 panicked in NewTicker).
func TestDurationsRefuseNonsense(t *testing.T) {
	bad := []string{"NaN", "nan", "Inf", "+Inf", "-Inf", "0", "-0", "-1", "1e-300", "0.0000001", "1e300", "9223372036854775807"}
	for _, v := range bad {
		_, err := ParseArgs([]string{"--monitor_interval=" + v, "x"}, noEnv, io.Discard)
		assert.ErrorContains(t, err, "--monitor_interval", v)
		_, err = ParseArgs([]string{"x"}, envOf(map[string]string{"PET_MONITOR_INTERVAL": v}), io.Discard)
		assert.ErrorContains(t, err, "$PET_MONITOR_INTERVAL", v)
		if v != "0" && v != "-0" { // --timeout=0: the workers' default
			_, err = ParseArgs([]string{"--timeout=" + v, "x"}, noEnv, io.Discard)
			assert.ErrorContains(t, err, "--timeout", v)
		}
		for _, key := range []string{"timeout", "join_timeout", "last_call_timeout", "read_timeout"} {
			_, err = ParseArgs([]string{"--rdzv_conf=" + key + "=" + v, "x"}, noEnv, io.Discard)
			assert.ErrorContains(t, err, "--rdzv_conf", "%s=%s", key, v)
		}
	}
	c, err := ParseArgs([]string{"--monitor_interval=0.001", "--rdzv_conf=timeout=604800,last_call_timeout=0.5", "x"}, noEnv, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, time.Millisecond, c.MonitorInterval)
	assert.Equal(t, 7*24*time.Hour, c.RdzvTimeout)
	assert.Equal(t, 500*time.Millisecond, c.LastCallTimeout)
	assert.Equal(t, 600*time.Second, c.JoinTimeout, "torchrun's default join_timeout")
	c, err = ParseArgs([]string{"x"}, noEnv, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 30*time.Second, c.LastCallTimeout, "torchrun's default last_call_timeout")
}

// TestNProcPerNodeKinds: cpu is the core count; neuron reads the Neuron
// variables; auto falls back to the cores.
func TestNProcPerNodeKinds(t *testing.T) {
	n, err := parseNProc("cpu", noEnv)
	require.NoError(t, err)
	assert.Equal(t, runtime.NumCPU(), n)
	n, err = parseNProc("neuron", envOf(map[string]string{"NEURON_NUM_DEVICES": "2"}))
	require.NoError(t, err)
	assert.Equal(t, 2, n)
	n, err = parseNProc("neuron", envOf(map[string]string{"NEURONCORE_NUM_DEVICES": "32"}))
	require.NoError(t, err)
	assert.Equal(t, 32, n)
	if countDevices("/dev", "nvidia") == 0 && countDevices("/dev", "neuron") == 0 {
		n, err = parseNProc("auto", noEnv)
		require.NoError(t, err)
		assert.Equal(t, runtime.NumCPU(), n)
		_, err = parseNProc("gpu", noEnv)
		assert.ErrorContains(t, err, "no NVIDIA GPU")
	}
}

// TestNProcPerNodeNeuronIsOnePerCore: --nproc_per_node=neuron starts a
// process per (logical) NeuronCore of the instance, not per chip.
func TestNProcPerNodeNeuronIsOnePerCore(t *testing.T) {
	dev := t.TempDir()
	for i := range 16 {
		require.NoError(t, os.WriteFile(filepath.Join(dev, fmt.Sprintf("neuron%d", i)), nil, 0o600))
	}
	dmi := func(name string) func(string) ([]byte, error) {
		return func(string) ([]byte, error) { return []byte(name + "\n"), nil }
	}
	for _, c := range []struct {
		dmi, lnc string
		want     int
		err      string
	}{
		{"trn1.32xlarge", "", 32, ""}, {"trn2.48xlarge", "", 64, ""}, {"trn2.48xlarge", "1", 128, ""},
		{"trn2u.48xlarge", "", 64, ""}, {"m7i.large", "", 32, ""}, {"trn1.32xlarge", "2", 0, "it takes 1"},
	} {
		n, err := neuronCores(dev, envOf(map[string]string{"NEURON_LOGICAL_NC_CONFIG": c.lnc}), dmi(c.dmi))
		if c.err != "" {
			assert.ErrorContains(t, err, c.err)
			continue
		}
		require.NoError(t, err)
		assert.Equal(t, c.want, n, "%s at LNC %q", c.dmi, c.lnc)
	}
	_, err := neuronCores(t.TempDir(), noEnv, dmi("trn1.32xlarge"))
	assert.ErrorContains(t, err, "no Neuron device found")
}

// TestHelpReadsLikeTorchruns: --help prints every option and exits clean.
func TestHelpReadsLikeTorchruns(t *testing.T) {
	var out bytes.Buffer
	_, err := ParseArgs([]string{"--help"}, noEnv, &out)
	require.Error(t, err)
	for _, name := range flagNames {
		if name == "module" {
			continue
		}
		assert.Contains(t, out.String(), "--"+name)
	}
	assert.Contains(t, out.String(), "usage: ddprun [options] TRAINING_BINARY")
}

// TestDetect: each cluster's variables give node rank, node count,
// endpoint and run id, recorded with their source; flags win.
func TestDetect(t *testing.T) {
	host, _ := os.Hostname()
	nodeFile := filepath.Join(t.TempDir(), "nodes")
	require.NoError(t, os.WriteFile(nodeFile, []byte("pbs-a.cluster\npbs-a.cluster\n"+host+"\n"+host+"\npbs-c\n"), 0o600))
	cases := []struct {
		name                 string
		env                  map[string]string
		args                 []string
		nnodes, node, nproc  int
		masterAddr, rdzvID   string
		endpoint, sourceNode string
	}{
		{name: "SageMaker GPUs", env: map[string]string{"SM_HOSTS": `["algo-1","algo-2"]`, "SM_CURRENT_HOST": "algo-2", "SM_NUM_GPUS": "4"},
			nnodes: 2, node: 1, nproc: 4, masterAddr: "algo-1", rdzvID: "none", sourceNode: "SageMaker current host"},
		{name: "SageMaker Neuron", env: map[string]string{"SM_HOSTS": `["algo-1"]`, "SM_CURRENT_HOST": "algo-1", "SM_NUM_GPUS": "0", "SM_NUM_NEURONS": "2"},
			nnodes: 1, node: 0, nproc: 2, masterAddr: "algo-1", rdzvID: "none", sourceNode: "SageMaker current host"},
		{name: "SLURM", env: map[string]string{"SLURM_JOB_NODELIST": "gpu-[03-04],cpu7", "SLURM_NNODES": "3", "SLURM_NODEID": "2", "SLURM_JOB_ID": "981"},
			nnodes: 3, node: 2, nproc: 1, masterAddr: "gpu-03", rdzvID: "981", sourceNode: "SLURM current host"},
		{name: "SLURM c10d", env: map[string]string{"SLURM_NODELIST": "n[1-2]", "SLURM_NODEID": "0"}, args: []string{"--rdzv_backend=c10d"},
			nnodes: 2, node: 0, nproc: 1, endpoint: "n1:29500", rdzvID: "none", sourceNode: "SLURM current host"},
		{name: "PBS", env: map[string]string{"PBS_NODEFILE": nodeFile, "PBS_JOBID": "77.pbs"},
			nnodes: 3, node: 1, nproc: 1, masterAddr: "pbs-a.cluster", rdzvID: "77.pbs", sourceNode: "PBS current host"},
		{name: "Kubeflow", env: map[string]string{"MASTER_ADDR": "job-master-0", "MASTER_PORT": "23456"},
			nnodes: 1, node: -1, nproc: 1, masterAddr: "job-master-0", rdzvID: "none"},
		{name: "flags win", env: map[string]string{"SLURM_JOB_NODELIST": "a,b", "SLURM_NODEID": "1"}, args: []string{"--nnodes=2", "--node_rank=0", "--master_addr=x"},
			nnodes: 2, node: 0, nproc: 1, masterAddr: "x", rdzvID: "none", sourceNode: "--node_rank"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := ParseArgs(append(c.args, "./train"), noEnv, io.Discard)
			require.NoError(t, err)
			require.NoError(t, Detect(&cfg, envOf(c.env)))
			assert.Equal(t, c.nnodes, cfg.NNodesMax)
			assert.Equal(t, c.node, cfg.NodeRank)
			assert.Equal(t, c.nproc, cfg.NProcPerNode)
			assert.Equal(t, c.masterAddr, cfg.MasterAddr)
			assert.Equal(t, c.endpoint, cfg.RdzvEndpoint)
			assert.Equal(t, c.rdzvID, cfg.RdzvID)
			if c.sourceNode != "" {
				assert.Equal(t, c.sourceNode, cfg.Sources["node_rank"])
			}
		})
	}
}

// TestDetectRefusesMalformed: a bad cluster variable is an error naming it.
func TestDetectRefusesMalformed(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "empty")
	require.NoError(t, os.WriteFile(empty, nil, 0o600))
	cases := []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"SM_HOSTS": `["algo-1"`, "SM_CURRENT_HOST": "algo-1"}, "$SM_HOSTS"},
		{map[string]string{"SM_HOSTS": `[]`, "SM_CURRENT_HOST": "algo-1"}, `$SM_HOSTS="[]": an empty list: want the job's host names`},
		{map[string]string{"SM_HOSTS": `["algo-1","algo-1"]`, "SM_CURRENT_HOST": "algo-1"}, `the host "algo-1" is listed twice`},
		{map[string]string{"SM_HOSTS": `["algo-1",""]`, "SM_CURRENT_HOST": "algo-1"}, "an empty host name"},
		{map[string]string{"SM_HOSTS": `null`, "SM_CURRENT_HOST": "algo-1"}, "an empty list"},
		{map[string]string{"SM_HOSTS": `{"a":1}`, "SM_CURRENT_HOST": "algo-1"}, "want a JSON list of host names"},
		{map[string]string{"SM_HOSTS": `["algo-1"]`, "SM_CURRENT_HOST": "algo-9"}, "$SM_CURRENT_HOST"},
		{map[string]string{"SM_HOSTS": `["algo-1"]`, "SM_CURRENT_HOST": "algo-1", "SM_NUM_GPUS": "x"}, "$SM_NUM_GPUS"},
		{map[string]string{"SLURM_JOB_NODELIST": "n[1-", "SLURM_NODEID": "0"}, "$SLURM_JOB_NODELIST"},
		{map[string]string{"SLURM_JOB_NODELIST": "n[3-1]", "SLURM_NODEID": "0"}, "$SLURM_JOB_NODELIST"},
		{map[string]string{"SLURM_JOB_NODELIST": "n[1-2]", "SLURM_NODEID": "2"}, "$SLURM_NODEID"},
		{map[string]string{"SLURM_JOB_NODELIST": "n[1-2]", "SLURM_NODEID": "0", "SLURM_NNODES": "3"}, "$SLURM_NNODES"},
		{map[string]string{"SLURM_JOB_NODELIST": "n[1-99999999]", "SLURM_NODEID": "0"}, "more than"},
		{map[string]string{"PBS_NODEFILE": "/nonexistent/nodes"}, "$PBS_NODEFILE"},
		{map[string]string{"PBS_NODEFILE": empty}, "no hosts"},
		{map[string]string{"MASTER_ADDR": "m", "MASTER_PORT": "port"}, "$MASTER_PORT"},
	}
	for _, c := range cases {
		cfg, err := ParseArgs([]string{"./train"}, noEnv, io.Discard)
		require.NoError(t, err)
		assert.ErrorContains(t, Detect(&cfg, envOf(c.env)), c.want, "%v", c.env)
	}
}

// TestSageMakerWithoutDevicesSaysSo: SM_NUM_GPUS=0 (a CPU instance)
// gives one worker per host, and ddprun says so and how to have more.
func TestSageMakerWithoutDevicesSaysSo(t *testing.T) {
	for _, env := range []map[string]string{
		{"SM_HOSTS": `["algo-1"]`, "SM_CURRENT_HOST": "algo-1", "SM_NUM_GPUS": "0"},
		{"SM_HOSTS": `["algo-1"]`, "SM_CURRENT_HOST": "algo-1", "SM_NUM_GPUS": "0", "SM_NUM_NEURONS": "0"},
	} {
		cfg, err := ParseArgs([]string{"./train"}, noEnv, io.Discard)
		require.NoError(t, err)
		require.NoError(t, Detect(&cfg, envOf(env)))
		assert.Equal(t, 1, cfg.NProcPerNode)
		require.Len(t, cfg.Notes, 1)
		assert.Contains(t, cfg.Notes[0], "SageMaker gives no GPUs or NeuronCores here (SM_NUM_GPUS=0): one worker per host; "+
			"for more on a CPU instance set PET_NPROC_PER_NODE")
		var out bytes.Buffer
		DryRun(&out, cfg, nil)
		assert.Contains(t, out.String(), "note: SageMaker gives no GPUs")
	}
	cfg, err := ParseArgs([]string{"--nproc_per_node=4", "./train"}, noEnv, io.Discard)
	require.NoError(t, err)
	require.NoError(t, Detect(&cfg, envOf(map[string]string{"SM_HOSTS": `["algo-1"]`, "SM_CURRENT_HOST": "algo-1", "SM_NUM_GPUS": "0"})))
	assert.Empty(t, cfg.Notes, "the user chose the worker count")
}

// TestPythonScriptIsExplained: ddprun main.py says that ddprun starts
// executables and how to run a Python script, before any rendezvous.
func TestPythonScriptIsExplained(t *testing.T) {
	script := filepath.Join(t.TempDir(), "main.py")
	require.NoError(t, os.WriteFile(script, []byte("print('hi')\n"), 0o644))
	for _, program := range []string{script, "main.py", filepath.Join(t.TempDir(), "missing")} {
		cfg, err := ParseArgs([]string{"--nproc_per_node=2", program}, noEnv, io.Discard)
		require.NoError(t, err)
		var stderr bytes.Buffer
		start := time.Now()
		code := Run(t.Context(), cfg, nil, io.Discard, &stderr)
		assert.Equal(t, 1, code)
		assert.Less(t, time.Since(start), 2*time.Second)
		assert.Contains(t, stderr.String(), "ddprun: cannot start "+program)
		if strings.HasSuffix(program, ".py") {
			assert.Contains(t, stderr.String(), "ddprun starts executables, not Python scripts: give the interpreter, "+
				"ddprun [options] python3 "+program)
		} else {
			assert.Contains(t, stderr.String(), "give the path of an executable")
		}
	}
}

// TestHugeNodeListNamesTheVariable: a SLURM list past the bound (here a
// range whose count overflows) is refused naming the variable.
func TestHugeNodeListNamesTheVariable(t *testing.T) {
	cfg, err := ParseArgs([]string{"--nproc_per_node=1", "--dry_run", "./train"}, noEnv, io.Discard)
	require.NoError(t, err)
	err = Detect(&cfg, envOf(map[string]string{"SLURM_JOB_NODELIST": "n[0-9223372036854775807]", "SLURM_NODEID": "0"}))
	assert.ErrorContains(t, err, `$SLURM_JOB_NODELIST="n[0-9223372036854775807]": `)
}

// TestDryRun prints the settings with their sources and each worker's
// environment, and starts nothing.
func TestDryRun(t *testing.T) {
	cfg, err := ParseArgs([]string{"--nproc_per_node=2", "--dry-run", "./train", "--lr", "1"}, noEnv, io.Discard)
	require.NoError(t, err)
	require.NoError(t, Detect(&cfg, envOf(map[string]string{"SLURM_JOB_NODELIST": "n[1-2]", "SLURM_NODEID": "1", "SLURM_JOB_ID": "5"})))
	var out bytes.Buffer
	DryRun(&out, cfg, nil)
	s := out.String()
	assert.Contains(t, s, "(SLURM current host)")
	assert.Contains(t, s, "(--nproc_per_node)")
	assert.Contains(t, s, "(default)")
	assert.Contains(t, s, "RANK=2")
	assert.Contains(t, s, "RANK=3")
	assert.Contains(t, s, "MASTER_ADDR=n1")
	assert.Contains(t, s, "WORLD_SIZE=4")
	assert.Contains(t, s, "TORCHELASTIC_RUN_ID=5")
	assert.True(t, strings.Contains(s, `"./train" ["--lr" "1"]`), s)
}
