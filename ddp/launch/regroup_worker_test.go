package launch_test

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/xladdp/xladdp/internal/workerenv"
)

// regroupScenario is a worker that plays a survivor of a peer's loss in
// its first round: it notes its commit and, where ddprun gave it a
// regroup directory, that it waits for its next place there, as ddp.Run
// does; "regroup-then-fail" fails once placed. A later round (or a
// placed worker) says who it is and exits 0.
func regroupScenario(name string) (int, bool) {
	if name != "regroup" && name != "regroup-then-fail" {
		return 0, false
	}
	w, err := workerenv.Parse(os.Getenv)
	if err != nil {
		fmt.Println(err)
		return 1, true
	}
	fmt.Printf("started pid %d as rank %d in round %d\n", os.Getpid(), w.Rank, w.RestartCount)
	if w.RestartCount != 0 {
		return 0, true
	}
	flight, dir := os.Getenv(workerenv.FlightDir), os.Getenv(workerenv.RegroupDir)
	note := "a peer was lost after step 7, the last this replica completed; committed: ck"
	if err := workerenv.WritePeerLossNote(flight, w.Rank, workerenv.Committed+note); err != nil {
		fmt.Println(err)
		return 1, true
	}
	if dir == "" {
		return workerenv.ExitPreempted, true
	}
	if err := workerenv.WritePeerLossNote(flight, w.Rank, workerenv.Regrouping+note); err != nil {
		fmt.Println(err)
		return 1, true
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	env, err := workerenv.AwaitRegroup(ctx, dir, w.LocalRank, w.RestartCount, time.Minute)
	if err != nil {
		fmt.Println("no place:", err)
		return workerenv.ExitPreempted, true
	}
	for _, kv := range env {
		fmt.Println("placed:", kv)
	}
	fmt.Printf("pid %d placed as rank %s\n", os.Getpid(), strconv.Quote(lookup(env, workerenv.Rank)))
	if name == "regroup-then-fail" {
		return 1, true
	}
	return 0, true
}

func lookup(env []string, name string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, name+"="); ok {
			return v
		}
	}
	return ""
}
