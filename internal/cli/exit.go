package cli

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/pflag"
)

// Exit ends the command after run returned err: status 0 for success and
// for --help (pflag has already printed the usage), else "name: err" on
// stderr and Status(err).
func Exit(name string, err error) {
	os.Exit(ExitCode(os.Stderr, name, err))
}

// ExitCode reports err as Exit does and returns the status instead of exiting.
func ExitCode(stderr io.Writer, name string, err error) int {
	if err == nil || errors.Is(err, pflag.ErrHelp) {
		return 0
	}
	fmt.Fprintf(stderr, "%s: %v\n", name, err)
	return Status(err)
}

// Status is the exit status for err: 0 for nil and --help; the status
// the error asks for (ExitStatus() int: a preempted job's 75) when every
// error joined in its chain asks for that one; else 1. A preemption
// joined to another failure is that failure: the job cannot simply be
// run again.
func Status(err error) int {
	if err == nil || errors.Is(err, pflag.ErrHelp) {
		return 0
	}
	if s, ok := askedStatus(err); ok {
		return s
	}
	return 1
}

// askedStatus is the status err's chain asks for, if all of it agrees.
func askedStatus(err error) (int, bool) {
	switch e := err.(type) {
	case interface{ ExitStatus() int }:
		return e.ExitStatus(), true
	case interface{ Unwrap() error }:
		if inner := e.Unwrap(); inner != nil {
			return askedStatus(inner)
		}
	case interface{ Unwrap() []error }:
		status, agreed := 0, false
		for i, inner := range e.Unwrap() {
			s, ok := askedStatus(inner)
			if !ok || (i > 0 && s != status) {
				return 0, false
			}
			status, agreed = s, true
		}
		return status, agreed
	}
	return 0, false
}
