// Command fleet plays a job's control plane at fleet size on this machine
// (fleetsim.Simulate: the agents' rendezvous, the workers' meeting in
// their store and a store barrier, the compiled programs' fan-out, the
// agents' watch and failure broadcast, the flight records' exchange) and
// runs torch 2.9's TCPStore side by side at the same client counts
// (examples/bench/peers/tcpstore_torch.py: its clients' init and torch's
// store-based barrier), alternated, and prints the medians.
//
//	go run ./examples/bench/fleet --ranks 512,1024,2048 --torch ~/.cache/xladdp/peers/torchxla/bin/python
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/xladdp/xladdp/ddp/launch/fleetsim"
)

func main() {
	ranks := flag.String("ranks", "512,1024,2048", "job sizes, in ranks")
	perNode := flag.Int("per-node", 32, "ranks per node (a trn1.32xlarge's NeuronCores)")
	rounds := flag.Int("rounds", 3, "alternated rounds of ours and torch's")
	torch := flag.String("torch", filepath.Join(os.Getenv("HOME"), ".cache/xladdp/peers/torchxla/bin/python"),
		"the Python with torch 2.9 (make bench's peers venv); empty: ours alone")
	programMiB := flag.Int("program-mib", 8, "size of each compiled program fanned out")
	flag.Parse()
	if err := run(*ranks, *perNode, *rounds, *torch, *programMiB); err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(1)
	}
}

func run(ranksFlag string, perNode, rounds int, torch string, programMiB int) error {
	var sizes []int
	for _, f := range strings.Split(ranksFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 2*perNode || n%perNode != 0 {
			return fmt.Errorf("--ranks: %q: want multiples of --per-node=%d, at least 2 nodes", f, perNode)
		}
		sizes = append(sizes, n)
	}
	fmt.Printf("machine: %s, %d CPUs, %s; medians of %d alternated rounds\n", cpuModel(), runtime.NumCPU(), runtime.Version(), rounds)
	for _, n := range sizes {
		var ours []fleetsim.Report
		var theirs []float64
		var torchName string
		for range rounds {
			rep, err := fleetsim.Simulate(context.Background(), fleetsim.Options{Nodes: n / perNode, RanksPerNode: perNode,
				Programs: 2, ProgramBytes: programMiB << 20, FlightEntries: 64, MonitorInterval: 100 * time.Millisecond,
				LastCallTimeout: 30 * time.Second})
			if err != nil {
				return err
			}
			ours = append(ours, rep)
			if torch != "" {
				secs, name, err := torchStore(torch, n)
				if err != nil {
					return err
				}
				theirs, torchName = append(theirs, secs), name
			}
		}
		med := medianReport(ours)
		fmt.Println(med)
		if len(theirs) > 0 {
			t := median(theirs)
			fmt.Printf("ranks %d: rendezvous + barrier: ours %.3f s (connect %.3f s), %s %.3f s: %.1fx\n", n, med.Barrier.Seconds(),
				med.WorkersConnected.Seconds(), torchName, t, t/med.Barrier.Seconds())
		}
	}
	return nil
}

// torchStore runs the torch script once at n clients.
func torchStore(python string, n int) (float64, string, error) {
	script := filepath.Join("examples", "bench", "peers", "tcpstore_torch.py")
	out, err := exec.Command(python, script, strconv.Itoa(n)).Output()
	if err != nil {
		return 0, "", fmt.Errorf("%s %s %d: %w", python, script, n, err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var res struct {
		Peer    string
		Seconds float64
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil {
		return 0, "", fmt.Errorf("the torch script said %q: %w", lines[len(lines)-1], err)
	}
	return res.Seconds, res.Peer, nil
}

// medianReport takes each phase's median over the rounds.
func medianReport(reps []fleetsim.Report) fleetsim.Report {
	d := func(f func(fleetsim.Report) time.Duration) time.Duration {
		var v []float64
		for _, r := range reps {
			v = append(v, float64(f(r)))
		}
		return time.Duration(median(v))
	}
	i := func(f func(fleetsim.Report) int) int {
		var v []float64
		for _, r := range reps {
			v = append(v, float64(f(r)))
		}
		return int(median(v))
	}
	m := reps[0]
	m.AgentRendezvous = d(func(r fleetsim.Report) time.Duration { return r.AgentRendezvous })
	m.WorkersConnected = d(func(r fleetsim.Report) time.Duration { return r.WorkersConnected })
	m.WorkersMet = d(func(r fleetsim.Report) time.Duration { return r.WorkersMet })
	m.Barrier = d(func(r fleetsim.Report) time.Duration { return r.Barrier })
	m.FanOut = d(func(r fleetsim.Report) time.Duration { return r.FanOut })
	m.Tick = d(func(r fleetsim.Report) time.Duration { return r.Tick })
	m.Stop = d(func(r fleetsim.Report) time.Duration { return r.Stop })
	m.FlightExchange = d(func(r fleetsim.Report) time.Duration { return r.FlightExchange })
	m.FlightBytes = i(func(r fleetsim.Report) int { return r.FlightBytes })
	var heap []float64
	for _, r := range reps {
		heap = append(heap, r.HeapMiB)
	}
	m.HeapMiB = median(heap)
	return m
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func cpuModel() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}
