package launch

import (
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/ddp/store"
)

// TestRendezvousDropsALeaderThatDied: a round whose first node is an
// agent that died as it joined (a state seeded with a node that never
// beats, closed by two real agents at --nnodes=2:3's maximum) would wait
// for it to choose the workers' store until the rendezvous timeout; the
// second node drops it after 5 s, leads, and the job runs on the two.
func TestRendezvousDropsALeaderThatDied(t *testing.T) {
	port := freeTestPort(t)
	srv, err := store.Listen("127.0.0.1:"+strconv.Itoa(port), "")
	require.NoError(t, err)
	defer srv.Close()
	c, err := store.Dial(t.Context(), srv.Addr(), "")
	require.NoError(t, err)
	defer c.Close()
	ghost := rdzvState{Nodes: []member{{ID: "ghost (pid 1, agent 0)", Rank: 0, NProc: 1, NNodes: "2:3"}}}
	raw, err := json.Marshal(ghost)
	require.NoError(t, err)
	id := "ghost-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	require.NoError(t, c.Set(t.Context(), fmt.Sprintf("ddprun/%s/rendezvous", id), raw))
	start := time.Now()
	res := runTwoAgents(t, id, "env", 0, func(int) []string {
		return []string{"--nnodes=2:3", "--nproc_per_node=1", "--rdzv_backend=c10d", "--rdzv_endpoint=" + srv.Addr(),
			"--rdzv_id=" + id, "--rdzv_conf=timeout=60,last_call_timeout=1", "--monitor_interval=0.05"}
	})
	for n, r := range res {
		assert.Equal(t, 0, r.code, "agent %d: %s", n, r.stderr)
	}
	assert.Contains(t, res[0].stderr+res[1].stderr, "first node, ghost (pid 1, agent 0), beat no heartbeat for 5s while the round met")
	assert.Contains(t, res[0].stdout+res[1].stdout, `"WORLD_SIZE":"2"`, "the two ran the job")
	assert.Less(t, time.Since(start), 45*time.Second, "dropped within seconds, not at the rendezvous timeout")
}
