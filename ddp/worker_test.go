package ddp

import (
	"os"
	"testing"
	"time"

	"github.com/xladdp/xladdp/ddp/dist"
	"github.com/xladdp/xladdp/ddp/internal/workertest"
)

// The multi-process harness (package workertest), under this package's
// names: the wrapper's scenarios make their own groups.
type report = workertest.Report

var (
	launchJob   = workertest.Launch
	waitReports = workertest.WaitReports
)

// groupScenarios are the worker scenarios of this package's tests.
var groupScenarios = map[string]func(rep *report){}

func TestMain(m *testing.M) { workertest.Main(m, runWorker) }

func runWorker(scenario string) int {
	rep := &report{Rank: workertest.Rank(), Hashes: map[string]string{}}
	defer workertest.Finish(rep)
	run, ok := groupScenarios[scenario]
	if !ok {
		rep.Error = "unknown scenario " + scenario
		return 1
	}
	run(rep)
	return 0
}

// workerOptions are the group options of a worker: the environment's,
// with $XLADDP_TEST_TIMEOUT as the timeout.
func workerOptions() dist.Options {
	o := dist.NewOptions()
	if s := os.Getenv("XLADDP_TEST_TIMEOUT"); s != "" {
		o.Timeout, _ = time.ParseDuration(s)
	}
	return o
}
