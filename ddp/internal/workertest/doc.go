// Package workertest is the multi-process harness of ddp's tests and
// ddp/dist's: the test binary re-executed as each rank of a job over
// loopback (Launch), running a named scenario (Main dispatches it) and
// printing its Report as its last line, which WaitReports reads. Both
// packages register their own scenarios.
package workertest
