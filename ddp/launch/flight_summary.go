package launch

import (
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"

	"github.com/xladdp/xladdp/ddp/internal/flight"
)

// maxFlightDirs bounds how many directories FlightSummary reports, and
// maxFlightDepth how far below DIR it looks.
const (
	maxFlightDirs  = 1000
	maxFlightDepth = 2
)

// FlightSummary is `ddprun flight DIR`: the diagnosis of the flight
// records under dir (one directory of flight-rank<N>.json files, as
// SIGUSR1 or a failure writes them, or a $XLADDP_FLIGHT_DIR holding
// several jobs and attempts), one line per directory of records, in name
// order. A directory with none is an error saying where records come
// from.
func FlightSummary(w io.Writer, dir string) error {
	var dirs []string
	root := filepath.Clean(dir)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == root {
				return err
			}
			return nil // an unreadable directory holds no records of ours
		}
		// Records lie at most at DIR/job-…/attempt_N: a deeper walk (a
		// mistyped DIR such as /) would read the whole file system.
		if d.IsDir() && path != root && strings.Count(strings.TrimPrefix(path, root), string(filepath.Separator)) > maxFlightDepth {
			return filepath.SkipDir
		}
		if d.IsDir() {
			if matches, _ := filepath.Glob(filepath.Join(path, "flight-rank*.json")); len(matches) > 0 && len(dirs) < maxFlightDirs {
				dirs = append(dirs, path)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("ddprun flight %s: %w", dir, err)
	}
	if len(dirs) == 0 {
		return fmt.Errorf("ddprun flight %s: no flight records (flight-rank<N>.json) there: a rank writes one on a failure or SIGUSR1 "+
			"(kill -USR1 <ddprun's pid> asks every worker), into $XLADDP_FLIGHT_DIR when it is set", dir)
	}
	slices.Sort(dirs)
	for _, d := range dirs {
		dumps, err := flight.Read(d)
		var expected []int // every rank of the job the records name
		if err == nil && len(dumps) > 0 {
			expected = flight.Ranks(dumps[0].World)
		}
		fmt.Fprintf(w, "%s: %s\n", d, diagnoseRecords(dumps, err, d, expected))
	}
	return nil
}
