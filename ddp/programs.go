package ddp

import (
	"os"

	"github.com/xladdp/xladdp/ddp/dist"
	"github.com/xladdp/xladdp/ddp/internal/progshare"
	"github.com/xladdp/xladdp/xla"
)

// EnvShareProgramsAcrossJob ("off") stops a job's processes from sharing
// compiled programs: each node then compiles every program itself.
const EnvShareProgramsAcrossJob = "XLADDP_SHARE_PROGRAMS"

// shareProgramsInJob makes e take the programs it lacks from the job's
// first process to compile them, through the process group's store, when
// this process is one of several.
func shareProgramsInJob(e *xla.Engine) {
	g := dist.Default()
	if g == nil || g.WorldSize() < 2 || os.Getenv(EnvShareProgramsAcrossJob) == "off" {
		return
	}
	e.ShareProgramsThrough(progshare.New(g.Store(), g.Rank(), g.WorldSize()))
}
