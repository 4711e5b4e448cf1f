package xla

// stepObserver hears what a trace does that a compiled step must learn
// (step_capture.go): the buffers it reads, the tensors it creates,
// assigns or aliases, the gradients it reads and sets, and the MarkStep
// that ends it. Lazy mode's observer, lazyMode, hears nothing.
type stepObserver interface {
	// tracing reports whether a compiled step's function runs now (its
	// closing MarkStep not yet begun).
	tracing() bool
	noteRead(t *Tensor)
	noteCreated(t *Tensor)
	noteAssigned(t *Tensor)
	noteAlias(copy, of *Tensor)
	noteGradRead(leaf *Tensor)
	noteGradSet(leaf *Tensor)
	// stepAliases are the donation pairs of tr, when tr is what the
	// step's closing MarkStep runs (nil otherwise); stepRan records that
	// MarkStep's trace and program.
	stepAliases(d *Device, tr *trace) []int
	stepRan(tr *trace, p *program)
}

// lazyMode is the observer of a device outside compiled steps.
type lazyMode struct{}

func (lazyMode) tracing() bool                     { return false }
func (lazyMode) noteRead(*Tensor)                  {}
func (lazyMode) noteCreated(*Tensor)               {}
func (lazyMode) noteAssigned(*Tensor)              {}
func (lazyMode) noteAlias(_, _ *Tensor)            {}
func (lazyMode) noteGradRead(*Tensor)              {}
func (lazyMode) noteGradSet(*Tensor)               {}
func (lazyMode) stepAliases(*Device, *trace) []int { return nil }
func (lazyMode) stepRan(*trace, *program)          {}

// noteCreated tells d's observer of t, made from host values, and
// returns t.
func (d *Device) noteCreated(t *Tensor) *Tensor {
	d.observer.noteCreated(t)
	return t
}

func (d *Device) noteGradRead(leaf *Tensor) { d.observer.noteGradRead(leaf) }
func (d *Device) noteGradSet(leaf *Tensor)  { d.observer.noteGradSet(leaf) }
