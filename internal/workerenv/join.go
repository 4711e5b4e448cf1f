package workerenv

import (
	"fmt"
	"os"
	"path/filepath"
)

// A node that arrives while an elastic job runs below its largest size
// is admitted without new processes where the workers allow it: each
// worker whose checkpointer can hold a step in memory and regroup in
// place says so in RegroupDir (MarkJoinable); its agent then asks the
// workers to stop at the next step boundary (RequestJoin) instead of
// sending them SIGTERM. They agree on the step, hold it in memory, say
// so in their note (Held) and regroup in place with the new node, whose
// workers heal from a live peer's memory (ddp/checkpoint).

// Held starts the note of a worker that holds a step in memory for a
// node joining the job (after Regrouping once it waits for its place).
const Held = "held "

// joinableFile is where local rank lr says it can hold a step for a
// joining node.
func joinableFile(dir string, lr int) string {
	return filepath.Join(dir, fmt.Sprintf("joinable-local-rank-%d", lr))
}

// MarkJoinable says, in dir (RegroupDir), that local rank lr can hold a
// step in memory and regroup in place for a joining node; unmark takes
// it back. Nothing is marked without a dir.
func MarkJoinable(dir string, lr int) (unmark func(), err error) {
	if dir == "" {
		return func() {}, nil
	}
	path := joinableFile(dir, lr)
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		return func() {}, fmt.Errorf("saying that local rank %d can hold a step for a joining node: %w", lr, err)
	}
	return func() { _ = os.Remove(path) }, nil
}

// Joinable reports whether local rank lr said it can hold a step for a
// joining node (a regular file only).
func Joinable(dir string, lr int) bool { return regular(joinableFile(dir, lr)) }

// joinRequestFile is the agent's request, in round, that its workers
// hold a step for a joining node.
func joinRequestFile(dir string, round int) string {
	return filepath.Join(dir, fmt.Sprintf("join-in-round-%d", round))
}

// RequestJoin asks the workers of round (their TORCHELASTIC_RESTART_COUNT)
// to hold the next step they all complete for a joining node.
func RequestJoin(dir string, round int) error {
	if err := os.WriteFile(joinRequestFile(dir, round), nil, 0o644); err != nil {
		return fmt.Errorf("asking the workers to hold a step for a joining node: %w", err)
	}
	return nil
}

// JoinRequested reports whether the agent asked the workers of round to
// hold a step for a joining node (a regular file only): a check of one
// file, cheap enough for every step.
func JoinRequested(dir string, round int) bool {
	return dir != "" && regular(joinRequestFile(dir, round))
}

func regular(path string) bool {
	info, err := os.Lstat(path)
	return err == nil && info.Mode().IsRegular()
}
