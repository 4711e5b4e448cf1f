package launch

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/xladdp/xladdp/ddp/store"
	"github.com/xladdp/xladdp/internal/freeport"
	"github.com/xladdp/xladdp/internal/quote"
)

// assignment is what a rendezvous round decides for this node.
type assignment struct {
	// round is the rendezvous round it was decided in: the attempt, or
	// later for a node that joined a running job at its next restart.
	round        int
	node, nnodes int
	offset       int // global rank of this node's local rank 0
	world        int
	master       string // host:port where worker rank 0 hosts its store
}

// rendezvous is this agent's link to the other nodes' agents: a store
// hosted by one of them (the endpoint's host).
type rendezvous struct {
	cfg    Config
	me     string // this node's identity in the claims (nodeID)
	client *store.Client
	server *store.Server
	token  string
	// endpointHost is the host the others reach the store at.
	endpointHost string
	addr         string // host:port of the store
	say          func(string, ...any)
	// storeLost: a round lost its connection to the store, which this
	// agent does not host; the next round checks it is back (storeBack).
	storeLost bool
}

// heartbeatTimeout is how long a node's agent may go silent before the
// others take its node for lost.
const heartbeatTimeout = 5 * time.Second

// openMeeting connects to (or hosts) the rendezvous store; a single node
// without an endpoint meets alone (standalone).
func openMeeting(ctx context.Context, c Config, token string, say func(string, ...any)) (meeting, error) {
	endpoint := c.RdzvEndpoint
	if c.RdzvBackend == "static" && endpoint == "" && c.NNodesMax > 1 {
		endpoint = net.JoinHostPort(orLocal(c.MasterAddr), strconv.Itoa(c.MasterPort))
	}
	if endpoint == "" || c.Standalone {
		if c.NNodesMax > 1 {
			return nil, errors.New("several nodes need a rendezvous: give --rdzv_endpoint (c10d) or --master_addr/--master_port (static)")
		}
		return standalone{cfg: c}, nil
	}
	host, portText, err := net.SplitHostPort(endpoint)
	port, perr := strconv.Atoi(portText)
	if err != nil || perr != nil || port < 0 || port > 65535 {
		return nil, fmt.Errorf("--rdzv_endpoint=%q: want HOST:PORT", endpoint)
	}
	r := &rendezvous{cfg: c, me: nodeID(), token: token, endpointHost: host, say: say}
	// Host the store if the endpoint is this machine's and nobody else
	// does (static: node 0 hosts it).
	mayHost := isLocal(host) && (c.RdzvBackend == "c10d" || c.NodeRank == 0 || c.NNodesMax == 1)
	if mayHost {
		if srv, err := store.Listen(net.JoinHostPort(host, portText), token); err == nil {
			r.server = srv
			if port == 0 {
				_, p, _ := net.SplitHostPort(srv.Addr())
				port, _ = strconv.Atoi(p)
				say("ddprun: rendezvous endpoint %s", net.JoinHostPort(host, p))
			}
		} else if port == 0 {
			return nil, fmt.Errorf("--rdzv_endpoint=%q: %w", endpoint, err)
		}
	} else if port == 0 {
		return nil, fmt.Errorf("--rdzv_endpoint=%q: port 0 (a free port) only works on the endpoint's own host", endpoint)
	}
	dialCtx, cancel := context.WithTimeout(ctx, c.RdzvTimeout)
	defer cancel()
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	stopReport := c.reportWaiting(say, func() string {
		who := "the rendezvous store (--rdzv_endpoint's host runs it)"
		if c.RdzvBackend == "static" {
			who = "node 0's rendezvous store (--master_addr:--master_port; is ddprun --node_rank=0 running there?)"
		}
		return fmt.Sprintf("cannot reach %s at %s yet", who, addr)
	})
	r.client, err = store.Dial(dialCtx, addr, token)
	stopReport()
	r.addr = addr
	if err != nil {
		r.close()
		return nil, fmt.Errorf("rendezvous at %s: %w", endpoint, err)
	}
	return r, nil
}

func orLocal(addr string) string {
	if addr == "" {
		return "127.0.0.1"
	}
	return addr
}

// isLocal reports whether host names an address of this machine.
func isLocal(host string) bool {
	if host == "" || host == "localhost" {
		return true
	}
	ips, err := net.LookupIP(host)
	if err != nil {
		return false
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, ip := range ips {
		if ip.IsLoopback() {
			return true
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
				return true
			}
		}
	}
	return false
}

func (r *rendezvous) close() {
	if r.client != nil {
		_ = r.client.Close()
	}
	if r.server != nil {
		// Other agents still finishing their last calls get answers.
		_ = r.server.Drain(2 * time.Second)
	}
}

func (r *rendezvous) key(round int, parts ...any) string {
	k := fmt.Sprintf("ddprun/%s/%d", r.cfg.RdzvID, round)
	for _, p := range parts {
		k += fmt.Sprintf("/%v", p)
	}
	return k
}

// join runs round's rendezvous: node ranks, the node count, every node's
// worker count and the workers' store address.
func (r *rendezvous) join(ctx context.Context, round int) (assignment, error) {
	if err := r.storeBack(ctx); err != nil {
		return assignment{}, err
	}
	me := r.me
	c := r.cfg
	ctx, cancel := context.WithTimeout(ctx, c.RdzvTimeout)
	defer cancel()
	joined, err := r.client.Add(ctx, r.key(round, "joined"), 1)
	if err != nil {
		return assignment{}, err
	}
	node := c.NodeRank
	if c.RdzvBackend == "c10d" {
		node = int(joined) - 1
	}
	if c.elastic() && node >= c.NNodesMax {
		// More nodes than the job takes: a spare, for a round after a
		// node is lost.
		closed, err := r.waitKey(ctx, round, r.key(round, "closed"))
		if err != nil {
			return assignment{}, err
		}
		nnodes, _ := strconv.Atoi(string(closed))
		return r.joinAtNextRestart(ctx, round, nnodes)
	}
	if err := r.claim(ctx, round, node, me); err != nil {
		return assignment{}, err
	}
	if err := r.client.Set(ctx, r.key(round, "nproc", node), []byte(strconv.Itoa(c.NProcPerNode))); err != nil {
		return assignment{}, err
	}
	stopReport := c.reportWaiting(r.say, func() string {
		qctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		n, _ := r.client.Add(qctx, r.key(round, "joined"), 0)
		return fmt.Sprintf("%d of --nnodes=%s nodes joined at %s (this is node %d)", n, c.nodesWanted(),
			r.addr, node)
	})
	defer stopReport()
	if node == 0 {
		if err := r.close0(ctx, round); err != nil {
			return assignment{}, err
		}
	}
	closed, err := r.waitKey(ctx, round, r.key(round, "closed"))
	if err != nil {
		return assignment{}, err
	}
	stopReport()
	nnodes, _ := strconv.Atoi(string(closed))
	if node >= nnodes {
		if c.RdzvBackend != "c10d" || c.NNodesMin == c.NNodesMax {
			return assignment{}, fmt.Errorf("node rank %d arrived after the rendezvous closed with %d nodes", node, nnodes)
		}
		return r.joinAtNextRestart(ctx, round, nnodes)
	}
	a := assignment{round: round, node: node, nnodes: nnodes}
	counts, err := r.plan(ctx, round, node, nnodes)
	if err != nil {
		return assignment{}, err
	}
	for n, k := range counts {
		if n < node {
			a.offset += k
		}
		a.world += k
	}
	if node == 0 {
		master, err := r.masterAddr(ctx)
		if err != nil {
			return assignment{}, err
		}
		if err := r.client.Set(ctx, r.key(round, "master"), []byte(master)); err != nil {
			return assignment{}, err
		}
	}
	m, err := r.waitKey(ctx, round, r.key(round, "master"))
	if err != nil {
		return assignment{}, err
	}
	a.master = string(m)
	return a, nil
}

// plan is every node's worker count: node 0 reads them once the round
// closed and posts them as one value, which the others read (each agent
// reading every node's key made the round cost nodes² calls).
func (r *rendezvous) plan(ctx context.Context, round, node, nnodes int) ([]int, error) {
	if node == 0 {
		var counts []string
		for n := range nnodes {
			v, err := r.waitKey(ctx, round, r.key(round, "nproc", n))
			if err != nil {
				return nil, err
			}
			counts = append(counts, string(v))
		}
		if err := r.client.Set(ctx, r.key(round, "plan"), []byte(strings.Join(counts, ","))); err != nil {
			return nil, err
		}
	}
	v, err := r.waitKey(ctx, round, r.key(round, "plan"))
	if err != nil {
		return nil, err
	}
	fields := strings.Split(string(v), ",")
	if len(fields) != nnodes {
		return nil, fmt.Errorf("rendezvous: node 0's plan names %d nodes' workers for %d nodes", len(fields), nnodes)
	}
	counts := make([]int, nnodes)
	for n, f := range fields {
		k, err := strconv.Atoi(f)
		if err != nil || k < 1 {
			return nil, fmt.Errorf("rendezvous: node %d's worker count %s is not a count", n, quote.Text([]byte(f)))
		}
		counts[n] = k
	}
	return counts, nil
}

// claim takes node rank node for this agent; a rank taken by another
// agent, or one outside the node count, fails every agent.
func (r *rendezvous) claim(ctx context.Context, round, node int, me string) error {
	if node < 0 {
		return r.conflict(ctx, round, "a node joined without --node_rank under the static rendezvous (give every node its --node_rank, or use --rdzv_backend=c10d)")
	}
	if node >= r.cfg.NNodesMax {
		return r.conflict(ctx, round, fmt.Sprintf("node rank %d with --nnodes=%d (ranks run from 0 to %d)", node, r.cfg.NNodesMax, r.cfg.NNodesMax-1))
	}
	got, err := r.client.CompareSet(ctx, r.key(round, "node", node), nil, []byte(me))
	if err != nil {
		return err
	}
	if string(got) != me {
		return r.conflict(ctx, round, fmt.Sprintf("node rank %d claimed by two nodes: %s and %s (give each node its own --node_rank)", node, quote.Bytes(got), me))
	}
	return nil
}

// conflict fails the round for every agent with msg.
func (r *rendezvous) conflict(ctx context.Context, round int, msg string) error {
	_, _ = r.client.CompareSet(ctx, r.key(round, "conflict"), nil, []byte(msg))
	return errors.New("rendezvous: " + msg)
}

// close0 is node 0's, as torchrun's c10d rendezvous: close the round at
// NNodesMax nodes, or LastCallTimeout after NNodesMin joined; fail if
// fewer than NNodesMin joined within JoinTimeout. (torchrun also fails
// when JoinTimeout ends during the last call; we close with the nodes we
// have, which are enough.)
func (r *rendezvous) close0(ctx context.Context, round int) error {
	c := r.cfg
	joinBy := time.Now().Add(c.JoinTimeout)
	var lastCall time.Time
	for {
		n, err := r.client.Add(ctx, r.key(round, "joined"), 0)
		if err != nil {
			return err
		}
		now := time.Now()
		if int(n) >= c.NNodesMin && lastCall.IsZero() {
			lastCall = now.Add(c.LastCallTimeout)
		}
		if int(n) >= c.NNodesMax || (!lastCall.IsZero() && (now.After(lastCall) || now.After(joinBy))) {
			count := min(int(n), c.NNodesMax)
			return r.client.Set(ctx, r.key(round, "closed"), []byte(strconv.Itoa(count)))
		}
		if lastCall.IsZero() && now.After(joinBy) {
			return r.conflict(ctx, round, fmt.Sprintf("%d of the %d nodes needed joined within join_timeout (%v); "+
				"start ddprun on every node, or lower --nnodes", n, c.NNodesMin, c.JoinTimeout))
		}
		if msg, _ := r.conflictMessage(ctx, round); msg != "" {
			return errors.New("rendezvous: " + msg)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("rendezvous: %d of %d nodes joined before the timeout: %w", n, c.NNodesMin, context.Cause(ctx))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// defaultReportInterval is Config.ReportInterval's default.
const defaultReportInterval = 30 * time.Second

// nodesWanted is --nnodes as given: N, or MIN:MAX.
func (c Config) nodesWanted() string {
	if c.NNodesMin == c.NNodesMax {
		return strconv.Itoa(c.NNodesMax)
	}
	return fmt.Sprintf("%d:%d", c.NNodesMin, c.NNodesMax)
}

// reportWaiting says every c.ReportInterval, until stopped, that the
// rendezvous still waits and what for; stop (idempotent) returns once it
// has stopped.
func (c Config) reportWaiting(say func(string, ...any), what func() string) (stop func()) {
	done, ended := make(chan struct{}), make(chan struct{})
	start := time.Now()
	go func() {
		defer close(ended)
		every := c.ReportInterval
		if every <= 0 {
			every = defaultReportInterval
		}
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				say("ddprun: rendezvous: still waiting after %v: %s", time.Since(start).Round(time.Second), what())
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done); <-ended }) }
}

func (r *rendezvous) conflictMessage(ctx context.Context, round int) (string, error) {
	ok, err := r.client.Check(ctx, r.key(round, "conflict"))
	if err != nil || !ok[0] {
		return "", err
	}
	v, err := r.client.Get(ctx, r.key(round, "conflict"))
	return quote.Text(v), err
}

// waitKey waits for key, failing at once if the round has a conflict.
func (r *rendezvous) waitKey(ctx context.Context, round int, key string) ([]byte, error) {
	for {
		short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		err := r.client.Wait(short, key)
		cancel()
		if err == nil {
			return r.client.Get(ctx, key)
		}
		if msg, cerr := r.conflictMessage(ctx, round); msg != "" || cerr != nil {
			if cerr != nil {
				return nil, cerr
			}
			return nil, errors.New("rendezvous: " + msg)
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("rendezvous: waiting for %s: %w", key, context.Cause(ctx))
		}
	}
}

// masterAddr is node 0's choice of where worker rank 0 hosts the
// workers' store: --master_addr (or the endpoint's host, or the address
// this node reaches the store from) and a free port (or --master_port
// when it is not the rendezvous').
func (r *rendezvous) masterAddr(ctx context.Context) (string, error) {
	c := r.cfg
	host := c.MasterAddr
	if host == "" {
		host = r.endpointHost
		if r.server == nil {
			host = r.client.LocalHost()
		}
	}
	if host == "" || host == "0.0.0.0" {
		host = "127.0.0.1"
	}
	port, err := freeport.Pick("")
	if err != nil {
		return "", fmt.Errorf("the workers' store: %w", err)
	}
	return net.JoinHostPort(host, strconv.Itoa(port)), nil
}

// nodeID names this agent in conflicts: host, pid and a nonce (two
// agents may share a process in tests, or a pid across hosts).
func nodeID() string {
	h, _ := os.Hostname()
	return fmt.Sprintf("%s (pid %d, agent %08x)", strings.TrimSpace(h), os.Getpid(), rand.Uint32())
}
