package main

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/xladdp/xladdp/examples/internal/exampletest"
)

func TestMain(m *testing.M) { exampletest.Main(m, "toy", main) }

// toyJob is the README's toy with --checkpoint-dir, launched as given:
// its final weights are its last step's checkpoint. A checkpoint every
// step stretches its 100 steps of about a millisecond to about 3 ms, so
// that a SIGTERM sent after step 20 reaches the workers through ddprun
// before the job ends.
func toyJob(launch []string, args ...string) exampletest.Job {
	return exampletest.Job{Name: "toy", Launch: launch, Args: append([]string{"--checkpoint-every", "1"}, args...),
		Final: "step-000000000100.safetensors", Fresh: "Loss after step 10:"}
}

// TestPreemptedResumesBitIdentical: the README's toy under --spawn (2
// replicas in one process), SIGTERMed at a random step: exit 75; the same
// command again resumes and ends with the weights of a run never
// stopped, bit for bit.
func TestPreemptedResumesBitIdentical(t *testing.T) {
	exampletest.CleanEnv(t)
	job := toyJob(nil, "--spawn", "--cpu-devices", "2")
	job.PreemptAndResume(t, job.Weights(t), exampletest.Marks("Loss after step %d:", 10, 20), rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0)))
}

// TestLongPreemptedAndKilledTrials: the same under ddprun (2 workers),
// three times, and three kill -9s of a random rank under
// --max_restarts=2, each ending with the uninterrupted run's weights,
// bit for bit.
func TestLongPreemptedAndKilledTrials(t *testing.T) {
	exampletest.CleanEnv(t)
	job := toyJob([]string{"--nproc_per_node=2"})
	job.Trials(t, 3, job.Weights(t), exampletest.Marks("Loss after step %d:", 10, 20))
}
