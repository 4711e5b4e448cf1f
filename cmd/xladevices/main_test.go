package main

import (
	"bytes"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestListsFourCPUDevices(t *testing.T) {
	t.Setenv("XLADDP_DEVICE", "")
	t.Setenv("PJRT_DEVICE", "")
	var out bytes.Buffer
	require.NoError(t, run([]string{"--cpu-devices", "4"}, &out), "the CPU plugin must be installed: run `make deps`")
	text := out.String()
	assert.Contains(t, text, "target:         cpu\n")
	assert.Regexp(t, regexp.MustCompile(`PJRT C API:     v0\.\d+\n`), text)
	assert.Regexp(t, regexp.MustCompile(`convolutions:   (onednn \d+\.\d+\.\d+|xla)\n`), text, "what runs the convolutions is said")
	assert.Contains(t, text, "deterministic:  off\n")
	assert.Contains(t, text, "devices:        4\n")
	for _, line := range []string{
		"  [0] id=0 kind=cpu process=0 (cpu:0)\n",
		"  [3] id=3 kind=cpu process=0 (cpu:3)\n",
	} {
		assert.Contains(t, text, line)
	}
}

func TestBadFlags(t *testing.T) {
	tests := []struct {
		args    []string
		wantErr string
	}{
		{[]string{"--cpu-devices", "0"}, "--cpu-devices=0: give a count from 1 to 1024"},
		{[]string{"--cpu-devices", "-3"}, "--cpu-devices=-3"},
		{[]string{"--cpu-devices", "many"}, "invalid argument \"many\""},
		{[]string{"--device", "tpu"}, "--device: unknown device target \"tpu\""},
		{[]string{"--device", "neuron"}, "target not available on this machine"},
		{[]string{"extra"}, "unexpected arguments [\"extra\"]"},
		{[]string{"--plugin", "/nonexistent/plugin.so"}, "\"/nonexistent/plugin.so\" does not exist"},
		{[]string{"--timeout", "0"}, "--timeout=0s: give a positive duration"},
		{[]string{"--timeout", "-1s"}, "--timeout=-1s: give a positive duration"},
		{[]string{"--timeout", "NaN"}, "invalid argument \"NaN\""},
		{[]string{"--timeout", "1ns"}, "--timeout=1ns: give a positive duration"},
	}
	for _, tt := range tests {
		t.Run(tt.wantErr, func(t *testing.T) {
			var out bytes.Buffer
			err := run(tt.args, &out)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.wantErr)
		})
	}
}
