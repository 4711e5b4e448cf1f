package cli

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/pflag"
)

// Exit ends the command after run returned err: status 0 for success and
// for --help (pflag has already printed the usage), else 1 with
// "name: err" on stderr.
func Exit(name string, err error) {
	os.Exit(ExitCode(os.Stderr, name, err))
}

// ExitCode reports err as Exit does and returns the status instead of exiting.
func ExitCode(stderr io.Writer, name string, err error) int {
	if err == nil || errors.Is(err, pflag.ErrHelp) {
		return 0
	}
	fmt.Fprintf(stderr, "%s: %v\n", name, err)
	return 1
}
