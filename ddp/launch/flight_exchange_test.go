package launch

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/ddp/internal/flight"
	"github.com/xladdp/xladdp/ddp/store"
)

// TestExchangeFlightGathersEveryNode: node 0 gathers every node's
// records, a node that posts after its first look included, and each
// other node's last collectives only; a node that does not gather gets
// its own back.
func TestExchangeFlightGathersEveryNode(t *testing.T) {
	srv, err := store.Listen("127.0.0.1:0", "")
	require.NoError(t, err)
	defer srv.Close()
	const nnodes = 3
	agents := make([]*rendezvous, nnodes)
	for n := range agents {
		c, err := store.Dial(t.Context(), srv.Addr(), "")
		require.NoError(t, err)
		defer c.Close()
		agents[n] = &rendezvous{cfg: Config{RdzvID: "flight"}, client: c, addr: srv.Addr()}
	}
	dump := func(rank int) flight.Dump {
		d := flight.Dump{Rank: rank, World: nnodes, Transport: "tcp"}
		for i := range flightEntriesShared + 4 {
			d.Entries = append(d.Entries, flight.Entry{Op: flight.Op{Seq: uint64(i + 1), Name: "AllReduce", Peer: -1}, State: flight.Done})
		}
		return d
	}
	assign := func(n int) assignment { return assignment{round: 2, node: n, nnodes: nnodes, offset: n, world: nnodes} }
	cases := []struct {
		name   string
		node   int
		gather bool
		ranks  []int
	}{
		{"node 1 shares", 1, false, []int{1}},
		{"node 0 gathers, node 2 late", 0, true, []int{0, 1, 2}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			late := make(chan error, 1)
			if c.gather {
				go func() {
					time.Sleep(100 * time.Millisecond) // after node 0's first look
					_, err := agents[2].exchangeFlight(t.Context(), assign(2), []flight.Dump{dump(2)}, false)
					late <- err
				}()
			}
			got, err := agents[c.node].exchangeFlight(t.Context(), assign(c.node), []flight.Dump{dump(c.node)}, c.gather)
			require.NoError(t, err)
			var ranks []int
			for _, d := range got {
				ranks = append(ranks, d.Rank)
				want := flightEntriesShared
				if d.Rank == c.node {
					want += 4 // its own, whole
				}
				assert.Len(t, d.Entries, want, "rank %d", d.Rank)
			}
			slices.Sort(ranks)
			assert.Equal(t, c.ranks, ranks)
			if c.gather {
				require.NoError(t, <-late)
			}
		})
	}
}
