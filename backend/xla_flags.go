package backend

import (
	"fmt"
	"os"
	"slices"
	"strings"
)

// xlaFlagEntry is one --name[=value] of XLA_FLAGS.
type xlaFlagEntry struct{ name, value string }

// parseXLAFlags splits XLA_FLAGS into its flags, in order ("--name" alone
// is name=true).
func parseXLAFlags(flags string) []xlaFlagEntry {
	var out []xlaFlagEntry
	for _, field := range strings.Fields(flags) {
		name, value, ok := strings.Cut(strings.TrimLeft(field, "-"), "=")
		if !ok {
			value = "true"
		}
		out = append(out, xlaFlagEntry{name, value})
	}
	return out
}

// roundingFlags are the XLA flags that change how a program rounds or
// sums, with the values that do: a deterministic job's bits must follow
// its data alone, and these make them follow the compiler's choices
// (fast math reassociates sums and may drop NaN and infinity handling;
// fast min/max drops NaN propagation).
var roundingFlags = map[string]string{
	"xla_cpu_enable_fast_math":             "true",
	"xla_cpu_fast_math_honor_nans":         "false",
	"xla_cpu_fast_math_honor_infs":         "false",
	"xla_cpu_fast_math_honor_division":     "false",
	"xla_cpu_fast_math_honor_functions":    "false",
	"xla_cpu_enable_fast_min_max":          "true",
	"xla_gpu_enable_fast_min_max":          "true",
	"xla_gpu_exclude_nondeterministic_ops": "false",
}

// checkDeterministicXLAFlags refuses, in deterministic mode, an XLA_FLAGS
// that gives a flag twice (XLA takes the last, a reader the first) or
// sets one that changes rounding or summation.
func checkDeterministicXLAFlags() error {
	entries := parseXLAFlags(os.Getenv(EnvXLAFlags))
	seen := map[string]string{}
	for _, e := range entries {
		if was, ok := seen[e.name]; ok {
			return fmt.Errorf("%w: %s gives --%s twice (%s, then %s): XLA takes the last; "+
				"in deterministic mode give each flag once", ErrBadOption, EnvXLAFlags, e.name, was, e.value)
		}
		seen[e.name] = e.value
		if bad, ok := roundingFlags[e.name]; ok && strings.EqualFold(e.value, bad) {
			return fmt.Errorf("%w: %s sets --%s=%s, which lets the compiler change how programs round and sum: "+
				"the deterministic mode's weights would follow the compiler's choices, not the data alone; drop it "+
				"(docs/deterministic.md lists the flags refused)", ErrBadOption, EnvXLAFlags, e.name, e.value)
		}
	}
	return nil
}

// roundingFlagNames lists the refused flags, for the docs' test.
func roundingFlagNames() []string {
	names := make([]string, 0, len(roundingFlags))
	for n := range roundingFlags {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
