// Package fleetsim plays a job's control plane at fleet size on one
// machine with the real code, for examples/bench/fleet: the agents'
// rendezvous and watch (launch.FleetAgent), the workers' meeting in their
// store (the TCP transport's), the compiled programs' fan-out (progshare)
// and the flight records' exchange and diagnosis. It lives apart from
// the launcher so that ddprun links neither the transport nor the
// program exchange.
package fleetsim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/xladdp/xladdp/ddp/internal/flight"
	"github.com/xladdp/xladdp/ddp/internal/progshare"
	"github.com/xladdp/xladdp/ddp/internal/tcp"
	"github.com/xladdp/xladdp/ddp/launch"
	"github.com/xladdp/xladdp/ddp/store"
	"github.com/xladdp/xladdp/internal/freeport"
)

// Options is the job Simulate plays: Nodes agents with
// RanksPerNode workers each, Programs compiled programs of ProgramBytes
// to fan out, and FlightEntries collectives in each rank's flight record.
type Options struct {
	Nodes, RanksPerNode int
	Programs            int
	ProgramBytes        int
	FlightEntries       int
	MonitorInterval     time.Duration
	LastCallTimeout     time.Duration
}

// Report is what each phase of the control plane took.
type Report struct {
	Ranks int
	// AgentRendezvous: every agent joined round 0 (static rendezvous).
	AgentRendezvous time.Duration
	// WorkersConnected: every worker dialled the workers' store;
	// WorkersMet: every worker has the job's address table (tcp.Meet);
	// Barrier: then every worker passed a store barrier.
	WorkersConnected, WorkersMet, Barrier time.Duration
	// HeapMiB is the Go heap in use after the workers met, less before:
	// the store's keys and values and the simulation's clients together.
	HeapMiB float64
	// FanOut: one rank published every program and one rank on each
	// other node fetched them (their siblings read the node's disk).
	FanOut time.Duration
	// Tick is the slowest agent's watch tick with the job healthy.
	Tick time.Duration
	// Stop: one node posted a failure; every other agent's watch saw it.
	Stop time.Duration
	// FlightExchange: every node shared its ranks' records and node 0
	// gathered them; FlightBytes is what node 0 downloaded, Diagnosis the
	// length of the text it prints.
	FlightExchange         time.Duration
	FlightBytes, Diagnosis int
}

// Simulate plays a job's control plane on this machine with the real
// code: the agents' rendezvous (one store client an agent), the
// workers' meeting in their store (one client a worker), the compiled
// programs' fan-out, the agents' watch and failure broadcast, and the
// flight records' exchange and diagnosis. Nothing trains: the workers'
// mesh, which needs a port per peer, is not built.
func Simulate(ctx context.Context, o Options) (Report, error) {
	if o.Nodes < 2 || o.RanksPerNode < 1 {
		return Report{}, fmt.Errorf("fleet: %d nodes of %d ranks: want at least 2 nodes of 1", o.Nodes, o.RanksPerNode)
	}
	rep := Report{Ranks: o.Nodes * o.RanksPerNode}
	agents, err := fleetAgents(ctx, o, &rep)
	defer func() {
		for _, a := range agents {
			a.Close()
		}
	}()
	if err != nil {
		return rep, err
	}
	srv, err := store.Listen("127.0.0.1:0", "")
	if err != nil {
		return rep, err
	}
	defer srv.Close()
	clients, err := fleetWorkers(ctx, srv.Addr(), rep.Ranks, &rep)
	defer func() {
		for _, c := range clients {
			if c != nil {
				c.Close()
			}
		}
	}()
	if err != nil {
		return rep, err
	}
	if err := fleetFanOut(ctx, clients, o, &rep); err != nil {
		return rep, err
	}
	if err := fleetFailure(ctx, agents, o, &rep); err != nil {
		return rep, err
	}
	return rep, fleetFlight(ctx, agents, o, &rep)
}

// fleetAgents opens every agent's link to the store (node 0 hosts it)
// and joins round 0.
func fleetAgents(ctx context.Context, o Options, rep *Report) ([]*launch.FleetAgent, error) {
	port, err := freeport.Pick("127.0.0.1")
	if err != nil {
		return nil, err
	}
	agents := make([]*launch.FleetAgent, 0, o.Nodes)
	for n := range o.Nodes {
		c := launch.Config{NNodesMin: o.Nodes, NNodesMax: o.Nodes, NProcPerNode: o.RanksPerNode, NodeRank: n, MasterAddr: "127.0.0.1",
			MasterPort: port, RdzvBackend: "static", RdzvID: "fleet", RdzvTimeout: 5 * time.Minute, JoinTimeout: 5 * time.Minute,
			LastCallTimeout: o.LastCallTimeout, ReportInterval: time.Hour, MonitorInterval: o.MonitorInterval}
		a, err := launch.OpenFleetAgent(ctx, c)
		if err != nil {
			return agents, fmt.Errorf("fleet: node %d: %w", n, err)
		}
		agents = append(agents, a)
	}
	start := time.Now()
	errs := make([]error, o.Nodes)
	var wg sync.WaitGroup
	for n, a := range agents {
		wg.Go(func() { errs[n] = a.Join(ctx) })
	}
	wg.Wait()
	rep.AgentRendezvous = time.Since(start)
	for n, err := range errs {
		if err != nil {
			return agents, fmt.Errorf("fleet: node %d's rendezvous: %w", n, err)
		}
	}
	return agents, nil
}

// fleetWorkers dials ranks clients to the workers' store at addr, meets
// them, and passes a barrier: what a job's init_process_group does.
func fleetWorkers(ctx context.Context, addr string, ranks int, rep *Report) ([]*store.Client, error) {
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	clients := make([]*store.Client, ranks)
	errs := make([]error, ranks)
	connected, met, passed := make([]time.Time, ranks), make([]time.Time, ranks), make([]time.Time, ranks)
	start := time.Now()
	var wg sync.WaitGroup
	for r := range ranks {
		wg.Go(func() {
			c, err := store.Dial(ctx, addr, "")
			if err != nil {
				errs[r] = err
				return
			}
			clients[r], connected[r] = c, time.Now()
			self := fmt.Sprintf("10.%d.%d.%d:%d node%d", r>>16&255, r>>8&255, r&255, 20000+r%10000, r/32)
			if _, errs[r] = tcp.Meet(ctx, c, r, ranks, self, "rank "+strconv.Itoa(r), 5*time.Minute); errs[r] != nil {
				return
			}
			met[r] = time.Now()
			errs[r], passed[r] = storeBarrier(ctx, c, ranks), time.Now()
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			return clients, fmt.Errorf("fleet: worker %d: %w", r, err)
		}
	}
	rep.WorkersConnected = slices.MaxFunc(connected, time.Time.Compare).Sub(start)
	rep.WorkersMet = slices.MaxFunc(met, time.Time.Compare).Sub(start)
	rep.Barrier = slices.MaxFunc(passed, time.Time.Compare).Sub(start)
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	rep.HeapMiB = float64(int64(after.HeapInuse)-int64(before.HeapInuse)) / (1 << 20)
	return clients, nil
}

// storeBarrier is torch's store-based barrier: count in; the last in
// says so; everyone waits for that key.
func storeBarrier(ctx context.Context, c *store.Client, ranks int) error {
	n, err := c.Add(ctx, "fleet/barrier", 1)
	if err != nil {
		return err
	}
	if n == int64(ranks) {
		if err := c.Set(ctx, "fleet/barrier/last", []byte("1")); err != nil {
			return err
		}
	}
	return c.Wait(ctx, "fleet/barrier/last")
}

// fleetFanOut: rank 0 compiles and publishes each program; rank 0 of
// every other node fetches it.
func fleetFanOut(ctx context.Context, clients []*store.Client, o Options, rep *Report) error {
	program := make([]byte, o.ProgramBytes)
	for i := range program {
		program[i] = byte(i)
	}
	start := time.Now()
	errs := make([]error, o.Nodes)
	var wg sync.WaitGroup
	for n := range o.Nodes {
		wg.Go(func() {
			x := progshare.New(clients[n*o.RanksPerNode], n*o.RanksPerNode, o.Nodes)
			for p := range o.Programs {
				name := "fleet-program-" + strconv.Itoa(p)
				first, done, err := x.Claim(ctx, name)
				if err != nil {
					errs[n] = err
					return
				}
				if first {
					done(program)
					continue
				}
				got, err := x.Fetch(ctx, name)
				if err == nil && len(got) != len(program) {
					err = fmt.Errorf("fetched %d bytes of %d", len(got), len(program))
				}
				if err != nil {
					errs[n] = fmt.Errorf("node %d, program %d: %w", n, p, err)
					return
				}
			}
		})
	}
	wg.Wait()
	rep.FanOut = time.Since(start)
	for _, err := range errs {
		if err != nil {
			return fmt.Errorf("fleet: the programs' fan-out: %w", err)
		}
	}
	return nil
}

// fleetFailure runs every agent's watch at the monitor interval, times
// the slowest healthy tick, then has node Nodes/2 post a failure and
// times until every other agent's watch reports it.
func fleetFailure(ctx context.Context, agents []*launch.FleetAgent, o Options, rep *Report) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	failing := o.Nodes / 2
	w := &watchers{healthy: time.Now().Add(max(time.Second/4, 5*o.MonitorInterval)), saw: make([]time.Time, len(agents))}
	var wg sync.WaitGroup
	for n, a := range agents {
		wg.Go(func() { w.watch(ctx, a, n, n == failing, o.MonitorInterval) })
	}
	time.Sleep(time.Until(w.healthy))
	failedAt := time.Now()
	if err := agents[failing].Fail(ctx, "simulated: worker 0 exited with status 1", failedAt); err != nil {
		cancel()
		wg.Wait()
		return fmt.Errorf("fleet: node %d posting its failure: %w", failing, err)
	}
	for deadline := failedAt.Add(30 * time.Second); time.Now().Before(deadline) && w.seen(failing) < o.Nodes-1; {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	rep.Tick = w.tick
	if w.err != nil {
		return w.err
	}
	for n, t := range w.saw {
		if n == failing {
			continue
		}
		if t.IsZero() {
			return fmt.Errorf("fleet: node %d's agent never saw node %d's failure", n, failing)
		}
		rep.Stop = max(rep.Stop, t.Sub(failedAt))
	}
	return nil
}

// watchers are the agents' watches in fleetFailure: the slowest healthy
// tick, and when each agent saw the failure.
type watchers struct {
	healthy time.Time // ticks before are the job's healthy ones
	mu      sync.Mutex
	tick    time.Duration
	saw     []time.Time
	err     error // the first tick that failed
}

// watch ticks node n's agent every interval until it sees a failure (the
// failing node's own agent: until ctx ends).
func (w *watchers) watch(ctx context.Context, a *launch.FleetAgent, n int, failing bool, interval time.Duration) {
	for ctx.Err() == nil {
		t := time.Now()
		why, err := a.Tick(ctx)
		took := time.Since(t)
		w.mu.Lock()
		if err != nil && ctx.Err() == nil && w.err == nil {
			w.err = fmt.Errorf("fleet: node %d's watch: %w", n, err)
		}
		if t.Before(w.healthy) {
			w.tick = max(w.tick, took)
		}
		if why != "" && !failing {
			w.saw[n] = time.Now()
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
		time.Sleep(interval)
	}
}

// seen counts the agents, failing's aside, that saw the failure.
func (w *watchers) seen(failing int) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	seen := 0
	for n, t := range w.saw {
		if n != failing && !t.IsZero() {
			seen++
		}
	}
	return seen
}

// fleetFlight has every node share its ranks' flight records and node 0
// gather them all, as after a failure on another node, then diagnoses
// node 0's view.
func fleetFlight(ctx context.Context, agents []*launch.FleetAgent, o Options, rep *Report) error {
	world := o.Nodes * o.RanksPerNode
	views := make([][]flight.Dump, len(agents))
	errs := make([]error, len(agents))
	start := time.Now()
	var wg sync.WaitGroup
	for n, a := range agents {
		local := make([]flight.Dump, o.RanksPerNode)
		for i := range local {
			local[i] = fleetDump(n*o.RanksPerNode+i, world, o.FlightEntries, n == o.Nodes/2 && i == 0)
		}
		wg.Go(func() { views[n], errs[n] = a.ExchangeFlight(ctx, local, n == 0) })
	}
	wg.Wait()
	rep.FlightExchange = time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("fleet: the flight records' exchange: %w", err)
	}
	for _, d := range views[0] {
		if d.Rank/o.RanksPerNode != 0 {
			// As posted: each rank's last collectives only.
			raw, _ := json.Marshal(d)
			rep.FlightBytes += len(raw)
		}
	}
	if len(views[0]) > 0 {
		rep.Diagnosis = len(flight.Diagnose(views[0], flight.Ranks(world)))
	}
	return nil
}

// fleetDump is a rank's record of entries all-reduces; the laggard has
// finished one fewer.
func fleetDump(rank, world, entries int, laggard bool) flight.Dump {
	d := flight.Dump{Rank: rank, World: world, Transport: "tcp", Reason: "simulated"}
	t0 := time.Now().Add(-time.Minute)
	for i := range entries {
		e := flight.Entry{Op: flight.Op{Seq: uint64(i + 1), Name: "AllReduce", DType: "float32", Count: 1 << 20, Peer: -1},
			State: flight.Done, Caller: "train.go:" + strconv.Itoa(50+i%7)}
		e.Issued, e.Started, e.Ended = t0.Add(time.Duration(i)*time.Millisecond), t0, t0
		d.Entries = append(d.Entries, e)
	}
	if !laggard && entries > 0 {
		d.Entries = append(d.Entries, flight.Entry{Op: flight.Op{Seq: uint64(entries + 1), Name: "AllReduce", DType: "float32",
			Count: 1 << 20, Peer: -1}, State: flight.Started, Caller: "train.go:61", Issued: t0, Started: t0})
	}
	return d
}

// String is the report on one line, for the bench.
func (r Report) String() string {
	ms := func(d time.Duration) string { return strconv.FormatFloat(d.Seconds()*1000, 'f', 1, 64) + " ms" }
	var b strings.Builder
	fmt.Fprintf(&b, "ranks %d: agents' rendezvous %s; workers connected %s, met %s, through the barrier %s; heap %+.1f MiB; "+
		"programs' fan-out %s; slowest healthy tick %s; failure seen by every agent %s; flight exchange %s (%d KiB a node), diagnosis %d bytes",
		r.Ranks, ms(r.AgentRendezvous), ms(r.WorkersConnected), ms(r.WorkersMet), ms(r.Barrier), r.HeapMiB, ms(r.FanOut), ms(r.Tick),
		ms(r.Stop), ms(r.FlightExchange), r.FlightBytes>>10, r.Diagnosis)
	return b.String()
}
