package checkpoint

import "github.com/xladdp/xladdp/internal/workerenv"

// ExitPreempted is the status a worker exits with once Checkpointer.Step
// returned ErrPreempted; ddprun exits with it too when every worker did:
// the job stopped on SIGTERM with its checkpoint committed, and running
// it again resumes (EX_TEMPFAIL).
const ExitPreempted = workerenv.ExitPreempted

// ErrPreempted is what Checkpointer.Step returns once the job was asked to
// stop (SIGTERM to any rank: a Spot notice, a SageMaker stop, SLURM's
// --signal) and every rank committed the checkpoint of this step. Return
// it from the training function: Main, and a process Spawn started, exit
// ExitPreempted for it.
var ErrPreempted = workerenv.ErrPreempted
