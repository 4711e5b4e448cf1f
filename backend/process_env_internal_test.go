package backend

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestProcessEnv: a process started per device sees that device alone,
// as its target says: the r-th GPU of the user's CUDA_VISIBLE_DEVICES (or
// r), a cuda job naming too few GPUs refused; one CPU device; an unknown
// target is an error.
func TestProcessEnv(t *testing.T) {
	cases := []struct {
		target  Target
		list    string
		n       int
		want    [][]string
		wantErr string
	}{
		{target: CUDA, list: "", n: 2, want: [][]string{{"CUDA_VISIBLE_DEVICES=0"}, {"CUDA_VISIBLE_DEVICES=1"}}},
		{target: CUDA, list: "2,3", n: 2, want: [][]string{{"CUDA_VISIBLE_DEVICES=2"}, {"CUDA_VISIBLE_DEVICES=3"}}},
		{target: CUDA, list: " 5 , 7 ,9", n: 2, want: [][]string{{"CUDA_VISIBLE_DEVICES=5"}, {"CUDA_VISIBLE_DEVICES=7"}}},
		{target: CUDA, list: "GPU-0f1e,GPU-aa", n: 2, want: [][]string{{"CUDA_VISIBLE_DEVICES=GPU-0f1e"}, {"CUDA_VISIBLE_DEVICES=GPU-aa"}}},
		{target: CUDA, list: "3", n: 2, wantErr: `CUDA_VISIBLE_DEVICES="3" names 1 GPU(s) for 2 processes`},
		{target: CPU, list: "3", n: 2, want: [][]string{{EnvCPUDevices + "=1"}, {EnvCPUDevices + "=1"}}},
		{target: "tpu", n: 1, wantErr: "tpu"},
	}
	for _, tc := range cases {
		getenv := func(k string) string {
			if k == "CUDA_VISIBLE_DEVICES" {
				return tc.list
			}
			return ""
		}
		var got [][]string
		var err error
		for r := range tc.n {
			var env []string
			if env, err = ProcessEnv(tc.target, r, tc.n, getenv); err != nil {
				break
			}
			got = append(got, env)
		}
		if tc.wantErr != "" {
			assert.ErrorContains(t, err, tc.wantErr, "%s %q", tc.target, tc.list)
			continue
		}
		require.NoError(t, err, "%s %q", tc.target, tc.list)
		assert.Equal(t, tc.want, got, "%s %q", tc.target, tc.list)
	}
}
