package launch

// workerEnvName makes the test binary a worker running a scenario
// (worker_test.go, an external test: its workers train through package
// ddp, which imports this one).
const workerEnvName = "XLADDP_LAUNCH_TEST_WORKER"

// WorkerEnvName is workerEnvName for the external test.
const WorkerEnvName = workerEnvName
