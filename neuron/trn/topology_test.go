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
