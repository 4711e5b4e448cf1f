package progshare

import (
	"fmt"
	"strings"
)

// EnvShare ("off") stops a job's processes from sharing compiled
// programs: each node then compiles every program itself.
const EnvShare = "XLADDP_SHARE_PROGRAMS"

// Enabled reads $XLADDP_SHARE_PROGRAMS's value v: on unless off.
func Enabled(v string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "", "on", "1", "true":
		return true, nil
	case "off", "0", "false":
		return false, nil
	}
	return false, fmt.Errorf("ddp: $%s=%q: want on or off", EnvShare, v)
}
