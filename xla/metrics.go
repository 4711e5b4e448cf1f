package xla

import (
	"fmt"
	"strings"
	"sync"
	"time"
)

// Metrics are process-wide counters, like torch_xla.debug.metrics.
type Metrics struct {
	Compilations    int64
	CompileTime     time.Duration
	LastCompileTime time.Duration
	CacheHits       int64
	Executions      int64
	// ExecuteTime is spent handing programs to the devices; execution is
	// asynchronous, so it does not include the run itself.
	ExecuteTime       time.Duration
	TransfersToDevice int64
	BytesToDevice     int64
	TransfersToHost   int64
	BytesToHost       int64
	// LastTraceNodes is the node count of the last trace MarkStep ran.
	LastTraceNodes int
	// PersistentCacheHits counts programs loaded from XLADDP_CACHE_DIR.
	PersistentCacheHits int64
	// ProgramsFetched counts programs taken from the job's first process
	// to compile them; ProgramsPublished those this process compiled
	// first and gave the job (Engine.ShareProgramsThrough).
	ProgramsFetched, ProgramsPublished int64
	// Collections counts the GCs MarkStep forced to learn which tensors
	// are alive: one per new recording, none for a repeated step.
	Collections int64
	// BufferCollections counts the GCs MarkStep forced to free the
	// buffers of collected tensors (buffer_pacing.go).
	BufferCollections int64
	// StepTraces counts compiled-step traces: one per new signature.
	StepTraces int64
	// DonatedBuffers counts input buffers given to a compiled step's
	// program to update in place (one per device).
	DonatedBuffers int64
	// SkippedExecutions counts MarkSteps compile-only mode did not run
	// (EnvCompileOnly).
	SkippedExecutions int64
	// AllReduces counts the in-graph all-reduces executed across local
	// replicas (AllReduce ops of programs run on more than one device,
	// once per program run, not per device).
	AllReduces int64
}

type metricsRegistry struct {
	mu sync.Mutex
	m  Metrics
}

var metrics metricsRegistry

// GetMetrics returns a snapshot of the counters.
func GetMetrics() Metrics {
	metrics.mu.Lock()
	defer metrics.mu.Unlock()
	return metrics.m
}

// ResetMetrics zeroes the counters.
func ResetMetrics() {
	metrics.mu.Lock()
	defer metrics.mu.Unlock()
	metrics.m = Metrics{}
}

// MetricsReport returns the counters as a readable report.
func MetricsReport() string {
	m := GetMetrics()
	var b strings.Builder
	row := func(name string, value any) { fmt.Fprintf(&b, "%-22s %v\n", name, value) }
	row("Compilations:", m.Compilations)
	row("CompileTime:", m.CompileTime)
	row("LastCompileTime:", m.LastCompileTime)
	row("CacheHits:", m.CacheHits)
	row("PersistentCacheHits:", m.PersistentCacheHits)
	row("ProgramsFetched:", m.ProgramsFetched)
	row("ProgramsPublished:", m.ProgramsPublished)
	row("Executions:", m.Executions)
	row("ExecuteTime:", m.ExecuteTime)
	if m.Executions > 0 {
		row("MeanExecuteTime:", m.ExecuteTime/time.Duration(m.Executions))
	}
	row("TransfersToDevice:", fmt.Sprintf("%d (%d bytes)", m.TransfersToDevice, m.BytesToDevice))
	row("TransfersToHost:", fmt.Sprintf("%d (%d bytes)", m.TransfersToHost, m.BytesToHost))
	row("LastTraceNodes:", m.LastTraceNodes)
	row("Collections:", m.Collections)
	row("BufferCollections:", m.BufferCollections)
	row("StepTraces:", m.StepTraces)
	row("DonatedBuffers:", m.DonatedBuffers)
	row("AllReduces:", m.AllReduces)
	if m.SkippedExecutions > 0 {
		row("SkippedExecutions:", m.SkippedExecutions)
	}
	return b.String()
}

func (r *metricsRegistry) update(f func(m *Metrics)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f(&r.m)
}

func (r *metricsRegistry) compiled(d time.Duration) {
	r.update(func(m *Metrics) { m.Compilations++; m.CompileTime += d; m.LastCompileTime = d })
}

func (r *metricsRegistry) cacheHit() { r.update(func(m *Metrics) { m.CacheHits++ }) }

func (r *metricsRegistry) executed(d time.Duration, nodes int) {
	r.update(func(m *Metrics) { m.Executions++; m.ExecuteTime += d; m.LastTraceNodes = nodes })
}

func (r *metricsRegistry) transferToDevice(bytes int64) {
	r.update(func(m *Metrics) { m.TransfersToDevice++; m.BytesToDevice += bytes })
}

func (r *metricsRegistry) transferToHost(bytes int64) {
	r.update(func(m *Metrics) { m.TransfersToHost++; m.BytesToHost += bytes })
}

func (r *metricsRegistry) persistentHit() { r.update(func(m *Metrics) { m.PersistentCacheHits++ }) }

func (r *metricsRegistry) programFetched()   { r.update(func(m *Metrics) { m.ProgramsFetched++ }) }
func (r *metricsRegistry) programPublished() { r.update(func(m *Metrics) { m.ProgramsPublished++ }) }

func (r *metricsRegistry) collected() { r.update(func(m *Metrics) { m.Collections++ }) }
func (r *metricsRegistry) collectedForBuffers() {
	r.update(func(m *Metrics) { m.BufferCollections++ })
}

func (r *metricsRegistry) stepTraced() { r.update(func(m *Metrics) { m.StepTraces++ }) }

func (r *metricsRegistry) donated(n int) { r.update(func(m *Metrics) { m.DonatedBuffers += int64(n) }) }

func (r *metricsRegistry) allReduced(n int) { r.update(func(m *Metrics) { m.AllReduces += int64(n) }) }

func (r *metricsRegistry) skippedExecution() { r.update(func(m *Metrics) { m.SkippedExecutions++ }) }
