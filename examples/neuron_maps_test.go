package examples

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xladdp/xladdp/internal/procfs"

	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/internal/syncbuf"
)

// mapsSeen is what a watcher saw in the memory maps of a command's
// process tree: for each process (pid → command name), whether the
// plugin and a libpython were mapped at some sample.
type mapsSeen struct {
	mu             sync.Mutex
	comm           map[int]string
	plugin, python map[int]bool
}

// pluginLoaders are the processes named program that had the plugin
// mapped; pythons those of them with a libpython mapped.
func (m *mapsSeen) pluginLoaders(program string) (loaders, pythons []int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for pid, comm := range m.comm {
		if comm != program || !m.plugin[pid] {
			continue
		}
		loaders = append(loaders, pid)
		if m.python[pid] {
			pythons = append(pythons, pid)
		}
	}
	return loaders, pythons
}

// runWatched runs argv like runCommand while sampling, every 5 ms, the
// maps of the command and every descendant: once a process has the
// plugin (pluginFile, its real path) mapped, its bootstrap is over, so a
// libpython it embedded would be mapped too.
func runWatched(t *testing.T, env, argv []string, pluginFile string) (string, *mapsSeen) {
	t.Helper()
	out, seen, err := watched(t.Context(), env, argv, pluginFile)
	require.NoError(t, err, "%s\n%s", strings.Join(argv, " "), out)
	return out, seen
}

// watched is runWatched's work, with its failure returned (for a
// goroutine of the test).
func watched(ctx context.Context, env, argv []string, pluginFile string) (string, *mapsSeen, error) {
	real, err := filepath.EvalSymlinks(pluginFile)
	if err != nil {
		return "", nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = env
	var out syncbuf.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	seen := &mapsSeen{comm: map[int]string{}, plugin: map[int]bool{}, python: map[int]bool{}}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			for _, pid := range descendants(cmd.Process.Pid) {
				seen.sample(pid, real)
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	})
	err = cmd.Wait()
	close(done)
	wg.Wait()
	return out.String(), seen, err
}

func (m *mapsSeen) sample(pid int, plugin string) {
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return // it ended between the listing and now
	}
	comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	m.mu.Lock()
	defer m.mu.Unlock()
	// A process that ended between the two reads has no name left: it
	// keeps the one an earlier sample read (CI's loaded machine lost a
	// gpt worker so).
	if name := strings.TrimSpace(string(comm)); name != "" {
		m.comm[pid] = name
	}
	m.plugin[pid] = m.plugin[pid] || strings.Contains(string(maps), plugin)
	m.python[pid] = m.python[pid] || strings.Contains(string(maps), "libpython")
}

// descendants is root and every process below it.
func descendants(root int) []int {
	out := []int{root}
	for i := 0; i < len(out); i++ {
		out = append(out, procfs.Children("/proc", out[i])...)
	}
	return out
}
