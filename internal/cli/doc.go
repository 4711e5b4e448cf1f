// Package cli holds what every xladdp command does the same way at exit:
// --help prints the usage and exits 0; any other error is printed with the
// command's name and exits 1, or with the status the error asks for (a
// preempted job's 75, workerenv.ErrPreempted).
package cli
