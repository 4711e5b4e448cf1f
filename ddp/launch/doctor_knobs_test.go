package launch

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/xladdp/xladdp/internal/knobs"
)

// badValues are, for every knob a reader parses, a value its reader
// refuses or misreads; a knob missing here fails the test.
var badValues = map[string][]string{
	knobs.EnvDevice:                     {"bogus", "cpu,cuda"},
	"XLADDP_PJRT_PLUGIN":                {"/nonexistent.so", "/dev/zero", "/tmp"},
	knobs.EnvCPUDevices:                 {"abc", "0", "100000", "-1"},
	knobs.EnvCPUExecution:               {"fast"},
	knobs.EnvCPUKernels:                 {"bogus", "mkl"},
	knobs.EnvDeterministic:              {"yes", "2"},
	"XLADDP_MALLOC":                     {"glibc"},
	"XLADDP_DEBUG":                      {"on"},
	"XLADDP_DONATE":                     {"of", "no"},
	knobs.EnvSharePrograms:              {"maybe"},
	knobs.EnvZeroBuddies:                {"maybe", "no"},
	knobs.EnvCompileOnly:                {"sure"},
	knobs.EnvBackend:                    {"nccl", "gloo"},
	"XLADDP_DISTRIBUTED_DEBUG":          {"on", "detail"},
	knobs.EnvTimeout:                    {"banana", "0", "-5s", "100h"},
	knobs.EnvFlightSize:                 {"lots", "-1", "99999999"},
	knobs.EnvShmMiB:                     {"abc", "100000", "-1"},
	"XLADDP_ADVERTISE_ADDR":             {"not an ip", "node-a"},
	"XLADDP_BIND_CPUS":                  {"yes"},
	knobs.EnvMPIThreads:                 {"single"},
	knobs.EnvMPIReduceOrder:             {"sorted"},
	"XLADDP_NEURON_WORLD_SIZE_VARIABLE": {"on"},
}

// TestDoctorChecksEveryKnob runs ddprun doctor over the whole knob table:
// each bad value of a knob its reader parses is a finding naming the
// variable, said within 5 s, and each knob's documented default, where
// it is a value, passes.
func TestDoctorChecksEveryKnob(t *testing.T) {
	for _, k := range knobs.Table() {
		if k.Check == nil {
			assert.NotContains(t, badValues, k.Name, "%s takes any value", k.Name)
			continue
		}
		bad, ok := badValues[k.Name]
		if !assert.True(t, ok, "%s is parsed by its reader: give it bad values here", k.Name) {
			continue
		}
		for _, v := range bad {
			t.Run(k.Name+"="+v, func(t *testing.T) {
				res := runDoctor(t, []string{"--nproc_per_node=2", "/bin/true"}, k.Name+"="+v)
				assert.Equal(t, 1, res.code, res.out)
				assert.Contains(t, res.out, "$"+k.Name, "the finding names the variable")
				assert.Contains(t, res.out, "fix it, or unset it")
				assert.Contains(t, res.out, map[bool]string{true: "silently take the default", false: "would stop at start"}[errors.Is(k.Check(v), knobs.ErrMisread)])
				assert.Less(t, res.elapsed, seededWithin)
			})
		}
		if def := strings.Trim(k.Default, "`"); !strings.Contains(def, " ") && k.Check(def) == nil {
			res := runDoctor(t, []string{"--nproc_per_node=2", "/bin/true"}, k.Name+"="+def)
			assert.Equal(t, 0, res.code, "%s=%s, its default: %s", k.Name, def, res.out)
		}
	}
}

// TestDoctorChecksPJRTDevice: torch-xla's PJRT_DEVICE, which the workers
// read when XLADDP_DEVICE is unset, is checked then, and only then.
func TestDoctorChecksPJRTDevice(t *testing.T) {
	res := runDoctor(t, []string{"--nproc_per_node=2", "/bin/true"}, "PJRT_DEVICE=bogus")
	assert.Equal(t, 1, res.code, res.out)
	assert.Contains(t, res.out, `$PJRT_DEVICE="bogus" (read since $XLADDP_DEVICE is unset): no such target`)
	res = runDoctor(t, []string{"--nproc_per_node=2", "/bin/true"}, "PJRT_DEVICE=bogus", "XLADDP_DEVICE=cpu")
	assert.Equal(t, 0, res.code, "XLADDP_DEVICE wins: %s", res.out)
}
