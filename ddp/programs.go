package ddp

import (
	"fmt"
	"os"
	"strings"

	"github.com/xladdp/xladdp/ddp/dist"
	"github.com/xladdp/xladdp/ddp/internal/progshare"
	"github.com/xladdp/xladdp/xla"
)

// EnvShareProgramsAcrossJob ("off") stops a job's processes from sharing
// compiled programs: each node then compiles every program itself.
const EnvShareProgramsAcrossJob = "XLADDP_SHARE_PROGRAMS"

// shareProgramsInJob makes e take the programs it lacks from the job's
// first process to compile them, through the process group's store, when
// this process is one of several. A group without a store (the mpi
// backend's: mpirun starts the ranks) shares none: each node compiles.
func shareProgramsInJob(e *xla.Engine) error {
	on, err := sharePrograms(os.Getenv(EnvShareProgramsAcrossJob))
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

// sharePrograms reads $XLADDP_SHARE_PROGRAMS.
func sharePrograms(v string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "", "on", "1", "true":
		return true, nil
	case "off", "0", "false":
		return false, nil
	}
	return false, fmt.Errorf("ddp: $%s=%q: want on or off", EnvShareProgramsAcrossJob, v)
}
