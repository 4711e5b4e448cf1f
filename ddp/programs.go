package ddp

import (
	"os"

	"github.com/xladdp/xladdp/ddp/dist"
	"github.com/xladdp/xladdp/ddp/internal/progshare"
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
