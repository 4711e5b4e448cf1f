package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAllDevicesAgree(t *testing.T) {
	t.Setenv("XLADDP_CPU_DEVICES", "")
	t.Setenv("CPU_NUM_DEVICES", "")
	for _, n := range []string{"1", "3"} {
		var out bytes.Buffer
		require.NoError(t, run([]string{"--devices", n}, &out), "the CPU plugin must be installed: run `make deps`")
		assert.Contains(t, out.String(), "all devices agree")
	}
	var out bytes.Buffer
	require.NoError(t, run([]string{"--devices", "3"}, &out))
	assert.Contains(t, out.String(), "expected: sum=[6 60 600] max=[3 30 300]\n")
	assert.Contains(t, out.String(), "device 2: input=[3 30 300] sum=[6 60 600] max=[3 30 300] ok\n")
}

func TestBadFlags(t *testing.T) {
	tests := []struct {
		args    []string
		wantErr string
	}{
		{[]string{"--devices", "0"}, "--devices=0: give at least 1"},
		{[]string{"--devices", "5000"}, "bad device count"},
		{[]string{"--device", "tpu"}, "--device: unknown device target"},
	}
	for _, tt := range tests {
		err := run(tt.args, &bytes.Buffer{})
		require.Error(t, err, tt.args)
		assert.Contains(t, err.Error(), tt.wantErr)
	}
}
