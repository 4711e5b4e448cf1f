package checkpoint

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/xladdp/xladdp/internal/readlimit"
)

// newestUsable refuses a directory whose newest checkpoint by name is
// not one (a directory named as a file, a FIFO, a device, a socket, a
// dangling link or a link loop): resuming from an older step in silence
// would lose the steps after it, so the entry is named with what it is.
func (ck *Checkpointer) newestUsable() error {
	names, _ := filepath.Glob(filepath.Join(ck.opts.Dir, "step-*"))
	newest, why, path := -1, "", ""
	for _, n := range names {
		var step int
		if _, err := fmt.Sscanf(filepath.Base(n), "step-%d", &step); err != nil || step < 0 || step < newest {
			continue
		}
		k, named := plain, n == ck.path(step, plain)
		if !named {
			k, named = sharded, n == ck.path(step, sharded)
		}
		if !named {
			continue
		}
		if reason := unusableAs(n, k); step > newest || reason != "" {
			newest, why, path = step, reason, n
		}
	}
	if why != "" {
		return fmt.Errorf("checkpoint: the newest checkpoint, %s, is %s: resuming from an older one would lose its steps; "+
			"move it away (or put the checkpoint back) and run again", path, why)
	}
	return nil
}

// unusableAs says why path cannot be a checkpoint of kind k ("" when it
// can): a plain checkpoint is a regular file, a sharded one a directory.
func unusableAs(path string, k kind) string {
	info, err := os.Stat(path)
	if err != nil {
		if link, lerr := os.Lstat(path); lerr == nil && link.Mode()&os.ModeSymlink != 0 {
			return fmt.Sprintf("a link that leads nowhere (%v)", err)
		}
		return fmt.Sprintf("unreadable (%v)", err)
	}
	switch mode := info.Mode(); {
	case k == plain && mode.IsRegular(), k == sharded && mode.IsDir():
		return ""
	case mode.IsDir():
		return "a directory, where a checkpoint file belongs"
	case mode.IsRegular():
		return "a file, where a sharded checkpoint's directory belongs"
	default:
		return readlimit.KindOf(mode)
	}
}
