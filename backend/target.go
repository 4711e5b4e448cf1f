package backend

import (
	"fmt"
	"os"
	"strings"
)

// Target is the kind of device a backend drives.
type Target string

const (
	CPU    Target = "cpu"
	CUDA   Target = "cuda"
	Neuron Target = "neuron"
)

// Environment variables that choose the target. XLADDP_DEVICE wins;
// PJRT_DEVICE is torch-xla's name, accepted so users' habits carry over.
const (
	EnvDevice     = "XLADDP_DEVICE"
	EnvPJRTDevice = "PJRT_DEVICE"
)

// targetAliases maps every accepted spelling (lower-cased) to its target.
var targetAliases = map[string]Target{
	"cpu":    CPU,
	"cuda":   CUDA,
	"gpu":    CUDA,
	"neuron": Neuron,
}

// ParseTarget accepts cpu, cuda, gpu and neuron in any case
// (torch-xla's CPU, CUDA, GPU, NEURON included).
func ParseTarget(s string) (Target, error) {
	if t, ok := targetAliases[strings.ToLower(strings.TrimSpace(s))]; ok {
		return t, nil
	}
	return "", fmt.Errorf("%w %q: use one of cpu, cuda (or gpu), neuron", ErrUnknownTarget, s)
}

// String returns the target's canonical name.
func (t Target) String() string { return string(t) }

// ResolveTarget is the target Open picks for explicit: explicit itself,
// else XLADDP_DEVICE, else PJRT_DEVICE, else cpu. A bad value names the
// variable it came from.
func ResolveTarget(explicit Target) (Target, error) {
	if explicit != "" {
		return ParseTarget(string(explicit))
	}
	for _, name := range []string{EnvDevice, EnvPJRTDevice} {
		if v, ok := os.LookupEnv(name); ok && v != "" {
			t, err := ParseTarget(v)
			if err != nil {
				return "", fmt.Errorf("$%s: %w", name, err)
			}
			return t, nil
		}
	}
	return CPU, nil
}
