package exampletest

import (
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// ResumeOnAnotherReplicaCount is issue 43's world-size scenario for
// example name, whose args give 2 epochs of n samples at a global batch
// of 24: a 4-replica job (--spawn) preempted after a random mark resumes
// on 3 processes (ddprun), and a 2-process one with --zero on 4
// replicas. Each says what changed, and the --sample-log files show every
// sample of both epochs used exactly once.
func ResumeOnAnotherReplicaCount(t *testing.T, name string, args []string, n int, marks []string) {
	t.Helper()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0))
	for _, tc := range []struct {
		name          string
		first, second []string // ddprun's flags; nil: --spawn --cpu-devices 4
		extra         []string
		changed       string
	}{
		{"4 to 3", nil, []string{"--nproc_per_node=3"}, nil, "written by 4 replicas (a global batch of 24), now 3 (24)"},
		{"2 to 4 with ZeRO", []string{"--nproc_per_node=2"}, nil, []string{"--zero"}, "written by 2 replicas (a global batch of 24), now 4 (24)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs, ckdir := t.TempDir(), filepath.Join(t.TempDir(), "ck")
			job := func(launch []string) Job {
				all := append(append(append([]string(nil), args...), "--sample-log", logs), tc.extra...)
				if launch == nil {
					all = append(all, "--spawn", "--cpu-devices", "4")
				}
				return Job{Name: name, Launch: launch, Args: all}
			}
			job(tc.first).Preempt(t, ckdir, marks, rng)
			assert.Contains(t, job(tc.second).Resume(t, ckdir), tc.changed)
			EachSampleOnce(t, logs, 2, n)
		})
	}
}
