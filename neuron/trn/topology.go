package trn

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Instance is a Trainium instance type's topology.
type Instance struct {
	Type string
	// Family is the chip generation, neuronx-cc's --target (trn1, trn2).
	Family string
	// Devices are Neuron devices (chips), each with PhysicalCores
	// NeuronCores; Cores are the logical NeuronCores a job sees at the
	// logical NeuronCore setting LNC (Devices × PhysicalCores / LNC).
	Devices, PhysicalCores, LNC, Cores int
	// EFA is the number of EFA interfaces (0: no EFA, no multi-node).
	EFA int
	// GroupSizes are the collective group sizes per node the runtime
	// supports.
	GroupSizes []int
}

// Instances are the Trainium instance types, from AWS's instance and
// Neuron documentation, at their default logical NeuronCore setting:
// Trainium2's 8 physical cores a chip are 4 logical ones (LNC 2).
var Instances = map[string]Instance{
	"trn1.2xlarge":   {Type: "trn1.2xlarge", Family: "trn1", Devices: 1, PhysicalCores: 2, LNC: 1, Cores: 2, EFA: 0, GroupSizes: []int{1, 2}},
	"trn1.32xlarge":  {Type: "trn1.32xlarge", Family: "trn1", Devices: 16, PhysicalCores: 2, LNC: 1, Cores: 32, EFA: 8, GroupSizes: []int{1, 2, 8, 32}},
	"trn1n.32xlarge": {Type: "trn1n.32xlarge", Family: "trn1", Devices: 16, PhysicalCores: 2, LNC: 1, Cores: 32, EFA: 16, GroupSizes: []int{1, 2, 8, 32}},
	"trn2.48xlarge":  {Type: "trn2.48xlarge", Family: "trn2", Devices: 16, PhysicalCores: 8, LNC: 2, Cores: 64, EFA: 16, GroupSizes: []int{1, 2, 4, 8, 16, 32, 64}},
	// An UltraServer's node: a trn2.48xlarge whose chips also reach the
	// other three nodes' over NeuronLink.
	"trn2u.48xlarge": {Type: "trn2u.48xlarge", Family: "trn2", Devices: 16, PhysicalCores: 8, LNC: 2, Cores: 64, EFA: 16, GroupSizes: []int{1, 2, 4, 8, 16, 32, 64}},
}

// WithLNC is inst at logical NeuronCore setting lnc: Trainium2 takes 1
// (every physical core, 128 on a trn2.48xlarge) or 2; Trainium1 only 1.
func (inst Instance) WithLNC(lnc int) (Instance, error) {
	if lnc == inst.LNC {
		return inst, nil
	}
	if inst.Family != "trn2" || lnc != 1 && lnc != 2 {
		allowed := "1 (its only setting)"
		if inst.Family == "trn2" {
			allowed = "1 or 2"
		}
		return Instance{}, fmt.Errorf("neuron: %s=%d on %s: it takes %s (neuronx-cc fails with NCC_EARG001 otherwise)",
			EnvLogicalNCConfig, lnc, inst.Type, allowed)
	}
	inst.LNC, inst.Cores = lnc, inst.Devices*inst.PhysicalCores/lnc
	inst.GroupSizes = nil
	for n := 1; n <= inst.Cores; n *= 2 {
		inst.GroupSizes = append(inst.GroupSizes, n)
	}
	return inst, nil
}

// CoresPerDevice are the logical NeuronCores of each device.
func (inst Instance) CoresPerDevice() int { return inst.Cores / max(inst.Devices, 1) }

// productNamePath is where EC2 names the instance type.
const productNamePath = "/sys/devices/virtual/dmi/id/product_name"

// DetectInstance returns this machine's instance type: $XLADDP_NEURON_INSTANCE_TYPE,
// else the DMI product name; ok is false on anything else.
func DetectInstance(getenv func(string) string, readFile func(string) ([]byte, error)) (Instance, bool, error) {
	name := strings.TrimSpace(getenv(EnvInstanceType))
	source := "$" + EnvInstanceType
	if name == "" {
		b, err := readFile(productNamePath)
		if err != nil {
			return Instance{}, false, nil
		}
		name, source = strings.TrimSpace(string(b)), productNamePath
	}
	inst, ok := Instances[name]
	if !ok {
		if source == productNamePath {
			return Instance{}, false, nil // not a Trainium instance
		}
		return Instance{}, false, fmt.Errorf("neuron: %s=%q is not a Trainium instance type (known: %s)", source, name, knownTypes())
	}
	if v := strings.TrimSpace(getenv(EnvLogicalNCConfig)); v != "" {
		lnc, err := strconv.Atoi(v)
		if err != nil {
			return Instance{}, false, fmt.Errorf("neuron: %s=%q is not a number: give 1 or 2 (Trainium2) or leave it unset", EnvLogicalNCConfig, v)
		}
		if inst, err = inst.WithLNC(lnc); err != nil {
			return Instance{}, false, err
		}
	}
	return inst, true, nil
}

// CompilerFlags returns ccflags (NEURON_CC_FLAGS) with the logical
// NeuronCore setting of a Trainium2 instance added, unless the flags
// give one: the compiler must shard for the setting the runtime uses.
func CompilerFlags(inst Instance, ccflags string) string {
	if inst.Family != "trn2" {
		return ccflags
	}
	for _, f := range strings.Fields(ccflags) {
		for _, name := range []string{"--logical-nc-config", "-lnc", "--lnc"} {
			if f == name || strings.HasPrefix(f, name+"=") {
				return ccflags
			}
		}
	}
	return strings.TrimSpace(ccflags + " --logical-nc-config=" + strconv.Itoa(inst.LNC))
}

func knownTypes() string {
	var names []string
	for n := range Instances {
		names = append(names, n)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// Layout is the job a validation checks.
type Layout struct {
	// ProcessesPerNode each drive CoresPerProcess NeuronCores.
	ProcessesPerNode, CoresPerProcess, Nodes int
	// VisibleCores is the user's NEURON_RT_VISIBLE_CORES ("" for none).
	VisibleCores string
}

// Validate rejects what inst cannot run, each with what to do instead.
func Validate(inst Instance, l Layout) error {
	perNode := l.ProcessesPerNode * max(l.CoresPerProcess, 1)
	switch {
	case l.ProcessesPerNode < 1 || l.Nodes < 1:
		return fmt.Errorf("neuron: %d processes per node on %d nodes: need at least one of each", l.ProcessesPerNode, l.Nodes)
	case perNode > inst.Cores:
		return fmt.Errorf("neuron: %d NeuronCores per node requested, but %s has %d: run at most %d processes per node",
			perNode, inst.Type, inst.Cores, inst.Cores/max(l.CoresPerProcess, 1))
	case l.Nodes > 1 && inst.EFA == 0:
		return fmt.Errorf("neuron: %d nodes of %s: it has no EFA interface, so it cannot run multi-node jobs; use trn1.32xlarge, trn1n.32xlarge or trn2.48xlarge",
			l.Nodes, inst.Type)
	case !slices.Contains(inst.GroupSizes, perNode):
		return fmt.Errorf("neuron: a collective group of %d NeuronCores per node: %s supports %v; run %s per node",
			perNode, inst.Type, inst.GroupSizes, sizesAsProcesses(inst.GroupSizes))
	}
	if l.VisibleCores != "" {
		cores, err := ParseCoreList(l.VisibleCores)
		if err != nil {
			return err
		}
		if len(cores) != perNode {
			return fmt.Errorf("neuron: NEURON_RT_VISIBLE_CORES=%q names %d cores for %d per node", l.VisibleCores, len(cores), perNode)
		}
		first := slices.Min(cores)
		if first%len(cores) != 0 {
			return fmt.Errorf("neuron: NEURON_RT_VISIBLE_CORES=%q starts at core %d, not a multiple of its size %d: the runtime allocates aligned groups (start at %d or %d)",
				l.VisibleCores, first, len(cores), first/len(cores)*len(cores), (first/len(cores)+1)*len(cores))
		}
		if last := slices.Max(cores); last >= inst.Cores {
			return fmt.Errorf("neuron: NEURON_RT_VISIBLE_CORES=%q names core %d, but %s has cores 0 to %d", l.VisibleCores, last, inst.Type, inst.Cores-1)
		}
	}
	return nil
}

func sizesAsProcesses(sizes []int) string {
	var s []string
	for _, n := range sizes {
		s = append(s, fmt.Sprint(n))
	}
	return strings.Join(s, ", ") + " cores"
}
