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
	// agents are the round's agents by node rank (nodeID: host, pid),
	// for naming a lost node.
	agents map[int]string
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
	// seen is the rendezvous state as this agent last read it: the
	// value its next compare-and-set expects (update).
	seen   []byte
	seenMu sync.Mutex
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
		// Other agents still finishing their last calls get answers (on a
		// loaded host a failed round's agents read the records seconds
		// after this one posted its own).
		_ = r.server.Drain(storeDrain)
	}
}

// storeDrain bounds how long the agent hosting the store waits at its
// end for the other agents to leave it.
const storeDrain = 10 * time.Second

func (r *rendezvous) key(round int, parts ...any) string {
	k := fmt.Sprintf("ddprun/%s/%d", r.cfg.RdzvID, round)
	for _, p := range parts {
		k += fmt.Sprintf("/%v", p)
	}
	return k
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
