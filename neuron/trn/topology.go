package trn

import (
	"fmt"
	"slices"
	"strings"
)

// Instance is a Trainium instance type's topology.
type Instance struct {
	Type string
	// Devices are Neuron devices (chips); Cores their NeuronCores.
	Devices, Cores int
	// EFA is the number of EFA interfaces (0: no EFA, no multi-node).
	EFA int
	// GroupSizes are the collective group sizes per node the runtime
	// supports.
	GroupSizes []int
}

// Instances are the Trainium instance types, from AWS's instance and
// Neuron documentation.
var Instances = map[string]Instance{
	"trn1.2xlarge":   {Type: "trn1.2xlarge", Devices: 1, Cores: 2, EFA: 0, GroupSizes: []int{1, 2}},
	"trn1.32xlarge":  {Type: "trn1.32xlarge", Devices: 16, Cores: 32, EFA: 8, GroupSizes: []int{1, 2, 8, 32}},
	"trn1n.32xlarge": {Type: "trn1n.32xlarge", Devices: 16, Cores: 32, EFA: 16, GroupSizes: []int{1, 2, 8, 32}},
	"trn2.48xlarge":  {Type: "trn2.48xlarge", Devices: 16, Cores: 64, EFA: 16, GroupSizes: []int{1, 2, 4, 8, 16, 32, 64}},
}

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
	return inst, true, nil
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
		return fmt.Errorf("neuron: %d nodes of %s: it has no EFA interface, so it cannot run multi-node jobs; use trn1.32xlarge or trn1n.32xlarge",
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
