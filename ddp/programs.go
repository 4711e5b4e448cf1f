package ddp

import (
	"os"

	"github.com/xladdp/xladdp/backend"
	"github.com/xladdp/xladdp/ddp/dist"
	"github.com/xladdp/xladdp/ddp/internal/pjrtkv"
	"github.com/xladdp/xladdp/ddp/internal/progshare"
	"github.com/xladdp/xladdp/ddp/store"
	"github.com/xladdp/xladdp/internal/workerenv"
	"github.com/xladdp/xladdp/xla"
)

// EnvShareProgramsAcrossJob is progshare.EnvShare ("off": no sharing).
const EnvShareProgramsAcrossJob = progshare.EnvShare

// shareProgramsInJob makes e take the programs it lacks from the job's
// first process to compile them, through the process group's store, when
// this process is one of several. A group without a store (the mpi
// backend's: mpirun starts the ranks) shares none: each node compiles.
func shareProgramsInJob(e *xla.Engine) error {
	on, err := progshare.Enabled(os.Getenv(EnvShareProgramsAcrossJob))
	if err != nil {
		return err
	}
	g := dist.Current()
	if g.WorldSize() < 2 || !on || g.Store() == nil {
		return nil
	}
	e.ShareProgramsThrough(progshare.New(g.Store(), g.Rank(), g.WorldSize()))
	return nil
}

// withJobKeyValue gives a process of a job of several, whose group has a
// store, the job's store as its plugin's key-value store (the
// distributed runtime's callbacks), kept under the job's run id and
// attempt and sealed with its store token.
func withJobKeyValue(bo backend.Options) (backend.Options, error) {
	g := dist.Current()
	if g.WorldSize() < 2 || g.Store() == nil {
		return bo, nil
	}
	w, err := workerenv.Parse(os.Getenv)
	if err != nil {
		return bo, err
	}
	bo.KeyValue = pjrtkv.New(g.Store(), w.RunID, max(w.RestartCount, 0), store.TokenFromEnv())
	return bo, nil
}
