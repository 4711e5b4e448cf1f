package launch

import (
	"fmt"
	"time"

	"github.com/xladdp/xladdp/ddp/internal/flight"
)

// stallWatch notices a job whose collectives stopped completing, from
// the flight records its workers write on request, and says where each
// rank stands while the stall lasts, killing nothing: a stopped rank
// (SIGSTOP, ^Z, a debugger) is said as stopped, a rank stuck elsewhere
// by the collective the others wait in. Work a rank declared (Busy) is
// given busyPatience times as long.
type stallWatch struct {
	after    time.Duration // --stall_warn: how long without progress before a word
	progress uint64        // the completed collectives last seen (flight.Completed)
	since    time.Time     // when progress last moved
	said     time.Time     // the last word
}

// newStallWatch watches with --stall_warn (0: never).
func newStallWatch(after time.Duration) *stallWatch {
	return &stallWatch{after: after, since: time.Now()}
}

// every is how often check runs (never when the watch is off): a tenth
// of --stall_warn, so the word comes at most that late.
func (sw *stallWatch) every() time.Duration {
	if sw.after <= 0 {
		return 24 * time.Hour
	}
	return max(sw.after/10, 250*time.Millisecond)
}

// check asks the workers for their records and returns the word to say
// ("" for none): after a stall of sw.after, then every sw.after while it
// lasts. A job with no records (no process group yet) never stalls.
func (sw *stallWatch) check(set workerSet, dir string) string {
	if sw.after <= 0 {
		return ""
	}
	dumps, err := set.collectFlight(dir)
	now := time.Now()
	if err != nil || len(dumps) == 0 {
		sw.since = now
		return ""
	}
	if done := flight.Completed(dumps); done != sw.progress {
		// The stall counts from the last collective's end, not from
		// this check: the word comes --stall_warn after the stop, give
		// or take a check's interval.
		sw.progress, sw.since, sw.said = done, now, time.Time{}
		if last := flight.LastEnded(dumps); !last.IsZero() && last.Before(now) {
			sw.since = last
		}
		return ""
	}
	if ended := flight.LastBusyEnded(dumps); ended.After(sw.since) && ended.Before(now) {
		// Declared work that ended is progress: the ranks went on from
		// it into the next collective.
		sw.since, sw.said = ended, time.Time{}
	}
	stalled := now.Sub(sw.since)
	busy, declared := flight.Declared(dumps, now)
	patience := sw.after
	if declared && len(set.stopped()) == 0 {
		// Declared work (an evaluation) is not a stall: said only if it
		// lasts busyPatience times as long.
		patience *= busyPatience
	}
	if stalled < patience || now.Sub(sw.said) < patience {
		return ""
	}
	sw.said = now
	word := set.diagnose(dumps, nil, dir, set.ranks())
	if declared {
		word += "; " + busy
	}
	return fmt.Sprintf("ddprun: no collective has completed for %s (--stall_warn; ddprun stops nothing for it): %s",
		stalled.Round(time.Second), word)
}

// busyPatience is how many --stall_warn periods of declared work (a rank
// evaluating: dist's Busy) pass before ddprun says the job stands.
const busyPatience = 10
