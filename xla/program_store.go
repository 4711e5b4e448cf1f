package xla

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"

	"github.com/xladdp/xladdp/xla/internal/progcache"
)

// lockOnDisk takes the disk entry's lock for compiling it (until the
// cache closes); without a disk cache, or when the lock cannot be taken
// (a read-only or lock-less file system, said with XLADDP_DEBUG=1), it
// compiles without.
func (c *programCache) lockOnDisk(h progcache.Header) (unlock func()) {
	if c.disk.Dir == "" {
		return func() {}
	}
	unlock, err := c.disk.Lock(c.closing, h, func(msg string) { slog.Info(msg) })
	if err != nil {
		if debugEnabled() {
			slog.Info("xladdp: persistent cache: compiling without the lock", "err", err)
		}
		return func() {}
	}
	return unlock
}

// loadFromDisk returns the program cached under want, or nil. A missing,
// corrupt or foreign file (another program, plugin, compiler, lowering,
// XLA_FLAGS, or an executable whose outputs differ) is a miss, never an
// error: the program is compiled instead and the file rewritten; say
// logs why a file present was not used. A hit is told to the job's
// exchange, which counts the processes that have the program.
func (c *programCache) loadFromDisk(want progcache.Header, devices []*Device, say bool) *program {
	if c.disk.Dir == "" {
		return nil
	}
	h, data, err := c.disk.Load(want)
	var p *program
	if err == nil {
		p, err = c.load(h, data, devices)
	}
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) && say {
			slog.Warn("xladdp: persistent cache: not using a cached file: compiling the program again", "path", c.disk.Path(want), "err", err)
		}
		return nil
	}
	metrics.persistentHit()
	c.have(want)
	return p
}

// load makes the program of a serialized executable cached under h.
func (c *programCache) load(h progcache.Header, executable []byte, devices []*Device) (*program, error) {
	exec, err := c.backend.LoadExecutable(executable, len(devices), deviceNums(devices))
	if err != nil {
		return nil, err
	}
	if exec.NumOutputs != h.Outputs {
		_ = exec.Destroy()
		return nil, fmt.Errorf("the executable has %d outputs, the program %d", exec.NumOutputs, h.Outputs)
	}
	return newProgram(&program{exec: exec, numOutputs: h.Outputs, description: h.Description}), nil
}

// saveToDisk stores a freshly compiled program and returns its encoded
// file (nil when neither the disk nor the job wants it); failures only
// cost a compilation elsewhere, so they are reported with XLADDP_DEBUG=1
// only.
func (c *programCache) saveToDisk(h progcache.Header, p *program) []byte {
	if c.disk.Dir == "" && c.exchange() == nil {
		return nil
	}
	h.Description = p.description
	var file []byte
	data, err := c.backend.SerializeExecutable(p.exec)
	if err == nil {
		file, err = progcache.Encode(h, data)
	}
	if err == nil && c.disk.Dir != "" {
		err = c.disk.StoreFile(h, file)
	}
	if err != nil && debugEnabled() {
		slog.Info("xladdp: persistent cache: not saving the program", "path", c.disk.Path(h), "err", err)
	}
	return file
}
