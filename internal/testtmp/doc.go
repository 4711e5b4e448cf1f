// Package testtmp runs a test binary's tests with a temporary directory
// of their own as $TMPDIR, removed once they end: what the tests and the
// programs they start (ddprun's flight directories, a worker's files)
// leave in it never outlives the run. It is for TestMain only.
package testtmp
