package xla

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"syscall"
)

// EnvMetricsFile names a file each process appends its metrics to, as
// one JSON line, when its engine closes (torch-xla's XLA_METRICS_FILE):
// a job's processes, on one machine or a shared file system, can then be
// summed, compilations first.
const EnvMetricsFile = "XLADDP_METRICS_FILE"

// metricsLine is what a process appends.
type metricsLine struct {
	Host    string  `json:"host"`
	PID     int     `json:"pid"`
	Metrics Metrics `json:"metrics"`
}

// appendMetrics appends this process's metrics to $XLADDP_METRICS_FILE,
// if set: one write of one line, so the lines of processes writing at
// once do not mix.
func appendMetrics() error {
	path := os.Getenv(EnvMetricsFile)
	if path == "" {
		return nil
	}
	host, _ := os.Hostname()
	line, err := json.Marshal(metricsLine{Host: host, PID: os.Getpid(), Metrics: GetMetrics()})
	if err != nil {
		return err
	}
	// O_NONBLOCK: a FIFO nobody reads fails at once instead of holding
	// Close forever.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NONBLOCK, 0o644)
	if err == nil {
		_, err = f.Write(append(line, '\n'))
		err = errors.Join(err, f.Close())
	}
	if err != nil {
		return fmt.Errorf("xla: writing the metrics to $%s=%s: %w", EnvMetricsFile, path, err)
	}
	return nil
}
