package ddptest

import (
	"os"
	"testing"
	"time"

	"github.com/xladdp/xladdp/ddp/dist"
	"github.com/xladdp/xladdp/ddp/internal/workertest"
)

// Report is what a worker prints for its test (package workertest).
type Report = workertest.Report

// Launch starts a job of the test binary running a scenario, and
// WaitReports collects each rank's Report (package workertest).
var (
	Launch      = workertest.Launch
	WaitReports = workertest.WaitReports
)

// Scenarios are the worker scenarios, by name: "equivalence" here, and
// each test package registers its own in init. Every scenario makes its
// own process group (JoinJob).
var Scenarios = map[string]func(rep *Report){}

// Main is the TestMain of a package whose tests run Scenarios: the test
// binary started as a worker runs its scenario, otherwise the tests.
func Main(m *testing.M) { workertest.Main(m, runWorker) }

func runWorker(scenario string) int {
	rep := &Report{Rank: workertest.Rank(), Hashes: map[string]string{}}
	defer workertest.Finish(rep)
	run, ok := Scenarios[scenario]
	if !ok {
		rep.Error = "unknown scenario " + scenario
		return 1
	}
	run(rep)
	return 0
}

// WorkerOptions are the group options of a worker: the environment's,
// with $XLADDP_TEST_TIMEOUT as the timeout.
func WorkerOptions() dist.Options {
	o := dist.NewOptions()
	if s := os.Getenv("XLADDP_TEST_TIMEOUT"); s != "" {
		o.Timeout, _ = time.ParseDuration(s)
	}
	return o
}

// ErrorText is err's text for a Report's Errors, "" for none.
func ErrorText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
