package flight

import (
	"fmt"
	"strings"
	"sync"
	"time"
)

// Busy is what a rank declared it does outside the collectives (an
// evaluation, say) and since when: a long time without a collective is
// then work, not a stall.
type Busy struct {
	What  string    `json:"what,omitempty"`
	Since time.Time `json:"since,omitzero"`
	// Ended is when the rank's last declared work ended: progress, as
	// a collective's end is.
	Ended time.Time `json:"ended,omitzero"`
}

// BusyState holds a rank's declared work; the zero value is idle.
type BusyState struct {
	mu  sync.Mutex
	now Busy
}

// Begin declares what the rank does until the returned end, which
// restores what was declared before (Begins nest) and may be called
// more than once.
func (s *BusyState) Begin(what string) (end func()) {
	s.mu.Lock()
	before := s.now
	s.now = Busy{What: what, Since: time.Now(), Ended: before.Ended}
	s.mu.Unlock()
	return sync.OnceFunc(func() {
		s.mu.Lock()
		s.now = Busy{What: before.What, Since: before.Since, Ended: time.Now()}
		s.mu.Unlock()
	})
}

// Now is what the rank declared it does, if anything.
func (s *BusyState) Now() Busy {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.now
}

// LastBusyEnded is when the latest declared work of dumps ended (zero
// when none has).
func LastBusyEnded(dumps []Dump) time.Time {
	var last time.Time
	for _, d := range dumps {
		if d.Busy.Ended.After(last) {
			last = d.Busy.Ended
		}
	}
	return last
}

// Declared lists the ranks of dumps busy with declared work ("rank 0 is
// evaluating (for 1m10s)"), and whether any is.
func Declared(dumps []Dump, now time.Time) (phrase string, any bool) {
	var parts []string
	for _, d := range dumps {
		if d.Busy.What != "" {
			parts = append(parts, fmt.Sprintf("rank %d is %s (for %s)", d.Rank, d.Busy.What, now.Sub(d.Busy.Since).Round(time.Second)))
		}
	}
	return strings.Join(parts, "; "), len(parts) > 0
}
