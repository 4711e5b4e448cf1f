package xla

import "fmt"

// BackwardHook runs at the end of every Backward on a device, once the
// gradients are accumulated, with the RequiresGrad leaves whose gradient
// that Backward added to (in the order they were marked). A hook may
// replace those gradients with SetGrad: this is where a data-parallel
// wrapper averages them across replicas, as torch's DDP reducer does from
// its autograd hooks. An error from a hook is Backward's error.
type BackwardHook func(leaves []*Tensor) error

type backwardHook struct{ fn BackwardHook }

// RegisterBackwardHook adds h to the device's backward hooks, which run in
// registration order, and returns the function that removes it (safe to
// call more than once). Like recording, hooks belong to the goroutine that
// drives the device.
func (d *Device) RegisterBackwardHook(h BackwardHook) (remove func()) {
	entry := &backwardHook{fn: h}
	d.backwardHooks = append(d.backwardHooks, entry)
	return func() {
		for i, e := range d.backwardHooks {
			if e == entry {
				d.backwardHooks = append(d.backwardHooks[:i:i], d.backwardHooks[i+1:]...)
				return
			}
		}
	}
}

func (d *Device) runBackwardHooks(leaves []*Tensor) error {
	if len(d.backwardHooks) == 0 {
		return nil
	}
	// A hook that removes itself (or registers another) changes the slice;
	// the ones registered when Backward ended run.
	hooks := append([]*backwardHook(nil), d.backwardHooks...)
	for i, h := range hooks {
		if err := h.fn(leaves); err != nil {
			return fmt.Errorf("xla: Backward on %s: backward hook %d: %w", d, i, err)
		}
	}
	return nil
}

// Tracing reports whether a compiled step is tracing on the device, when
// values cannot be read (no MarkStep, Item or ToHost): a hook that needs
// them must refuse.
func (d *Device) Tracing() bool { return d.observer.tracing() }
