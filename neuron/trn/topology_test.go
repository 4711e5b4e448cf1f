package trn

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDetectInstance(t *testing.T) {
	noFile := func(string) ([]byte, error) { return nil, os.ErrNotExist }
	file := func(s string) func(string) ([]byte, error) {
		return func(string) ([]byte, error) { return []byte(s + "\n"), nil }
	}
	inst, ok, err := DetectInstance(envOf(nil), file("trn1.32xlarge"))
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, 32, inst.Cores)
	inst, ok, err = DetectInstance(envOf(map[string]string{EnvInstanceType: "trn1.2xlarge"}), file("trn1.32xlarge"))
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, 2, inst.Cores, "the variable wins")
	_, ok, err = DetectInstance(envOf(nil), file("Standard PC (Q35 + ICH9, 2009)"))
	assert.NoError(t, err)
	assert.False(t, ok, "not a Trainium machine")
	_, ok, err = DetectInstance(envOf(nil), noFile)
	assert.NoError(t, err)
	assert.False(t, ok)
	_, _, err = DetectInstance(envOf(map[string]string{EnvInstanceType: "trn9.huge"}), noFile)
	assert.ErrorContains(t, err, "is not a Trainium instance type (known: trn1.2xlarge, trn1.32xlarge")

	for _, c := range []struct {
		dmi, lnc string
		cores    int
		want     string
	}{
		{"trn2.48xlarge", "", 64, ""}, {"trn2.48xlarge", "2", 64, ""}, {"trn2.48xlarge", "1", 128, ""},
		{"trn2u.48xlarge", "", 64, ""}, {"trn2u.48xlarge", " 1 ", 128, ""},
		{"trn2.48xlarge", "two", 0, "is not a number: give 1 or 2"}, {"trn2.48xlarge", "3", 0, "it takes 1 or 2"},
		{"trn1.32xlarge", "1", 32, ""}, {"trn1.32xlarge", "2", 0, "it takes 1 (its only setting)"},
	} {
		inst, ok, err := DetectInstance(envOf(map[string]string{EnvLogicalNCConfig: c.lnc}), file(c.dmi))
		if c.want != "" {
			assert.ErrorContains(t, err, c.want, "%s at LNC %q", c.dmi, c.lnc)
			continue
		}
		require.NoError(t, err)
		assert.True(t, ok)
		assert.Equal(t, c.cores, inst.Cores, "%s at LNC %q", c.dmi, c.lnc)
		assert.Equal(t, inst.Cores, inst.GroupSizes[len(inst.GroupSizes)-1], "the whole node is a group")
		assert.Equal(t, inst.Cores/inst.Devices, inst.CoresPerDevice())
	}
}

func TestCompilerFlags(t *testing.T) {
	trn2, trn1 := Instances["trn2.48xlarge"], Instances["trn1.32xlarge"]
	assert.Equal(t, "--logical-nc-config=2", CompilerFlags(trn2, ""))
	assert.Equal(t, "-O2 --logical-nc-config=2", CompilerFlags(trn2, "-O2"))
	assert.Equal(t, "-O2 --lnc=1", CompilerFlags(trn2, "-O2 --lnc=1"), "the user's setting is kept")
	assert.Equal(t, "-lnc 1", CompilerFlags(trn2, "-lnc 1"))
	assert.Equal(t, "-O2", CompilerFlags(trn1, "-O2"), "Trainium1 has one setting")
}

// TestValidate: each thing the hardware cannot do is refused with its fix.
func TestValidate(t *testing.T) {
	small, big := Instances["trn1.2xlarge"], Instances["trn1.32xlarge"]
	ok := []struct {
		inst Instance
		l    Layout
	}{
		{small, Layout{ProcessesPerNode: 2, CoresPerProcess: 1, Nodes: 1}},
		{small, Layout{ProcessesPerNode: 1, CoresPerProcess: 2, Nodes: 1}},
		{big, Layout{ProcessesPerNode: 32, CoresPerProcess: 1, Nodes: 2}},
		{big, Layout{ProcessesPerNode: 8, CoresPerProcess: 1, Nodes: 1, VisibleCores: "8-15"}},
		{Instances["trn2.48xlarge"], Layout{ProcessesPerNode: 64, CoresPerProcess: 1, Nodes: 4}},
		{Instances["trn2.48xlarge"], Layout{ProcessesPerNode: 4, CoresPerProcess: 1, Nodes: 1, VisibleCores: "4-7"}},
	}
	for _, c := range ok {
		assert.NoError(t, Validate(c.inst, c.l), "%+v on %s", c.l, c.inst.Type)
	}
	bad := []struct {
		inst Instance
		l    Layout
		want string
	}{
		{small, Layout{ProcessesPerNode: 4, CoresPerProcess: 1, Nodes: 1}, "but trn1.2xlarge has 2: run at most 2 processes per node"},
		{small, Layout{ProcessesPerNode: 2, CoresPerProcess: 1, Nodes: 2}, "has no EFA interface"},
		{big, Layout{ProcessesPerNode: 4, CoresPerProcess: 1, Nodes: 1}, "a collective group of 4 NeuronCores per node: trn1.32xlarge supports [1 2 8 32]"},
		{big, Layout{ProcessesPerNode: 16, CoresPerProcess: 1, Nodes: 1}, "a collective group of 16"},
		{big, Layout{ProcessesPerNode: 8, CoresPerProcess: 1, Nodes: 1, VisibleCores: "4-11"}, "starts at core 4, not a multiple of its size 8"},
		{big, Layout{ProcessesPerNode: 8, CoresPerProcess: 1, Nodes: 1, VisibleCores: "0-3"}, "names 4 cores for 8 per node"},
		{big, Layout{ProcessesPerNode: 0, CoresPerProcess: 1, Nodes: 1}, "need at least one"},
		{small, Layout{ProcessesPerNode: 2, CoresPerProcess: 1, Nodes: 1, VisibleCores: "2-3"}, "has cores 0 to 1"},
	}
	for _, c := range bad {
		assert.ErrorContains(t, Validate(c.inst, c.l), c.want, "%+v on %s", c.l, c.inst.Type)
	}
}
