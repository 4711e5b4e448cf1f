package progshare

import (
	"fmt"

	"github.com/xladdp/xladdp/internal/knobs"
)

// EnvShare ("off") stops a job's processes from sharing compiled
// programs: each node then compiles every program itself.
const EnvShare = knobs.EnvSharePrograms

// Enabled reads $XLADDP_SHARE_PROGRAMS's value v: on unless off.
func Enabled(v string) (bool, error) {
	on, err := knobs.SharePrograms(v)
	if err != nil {
		return false, fmt.Errorf("ddp: %w", err)
	}
	return on, nil
}
