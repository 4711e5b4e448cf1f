package xla

import (
	"context"
	"fmt"
	"reflect"
	"unsafe"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/dtypes/bfloat16"
	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/go-xla/pjrt"
	"github.com/gomlx/gomlx/core/tensors"
)

// materialize forces a MarkStep if t is pending, as reading a value in
// torch-xla (loss.item(), t.cpu()) does.
func (t *Tensor) materialize(ctx context.Context) error {
	if t.err != nil {
		return t.err
	}
	t.settle()
	if t.node != nil {
		// A handle a repeated step left out (it looked dropped when the
		// step was first seen) is computed now, from its recipe.
		t.dev.trackPending(t)
		if err := t.dev.MarkStep(ctx); err != nil {
			return err
		}
	}
	if t.data == nil {
		return fmt.Errorf("xla: %s has no value after MarkStep", t)
	}
	return nil
}

// toHost copies the value to the host, running a MarkStep first if it is pending.
func (t *Tensor) toHost(ctx context.Context) (*tensors.Tensor, error) {
	if err := t.materialize(ctx); err != nil {
		return nil, err
	}
	release, err := t.dev.engine.enter("device-to-host transfer")
	if err != nil {
		return nil, err
	}
	defer release()
	host, err := t.data.readHost(t.dev)
	if err != nil {
		// A value of a step that failed asynchronously: say which step.
		if stepErr := t.dev.lastStepError(); stepErr != nil {
			return nil, stepErr
		}
		return nil, fmt.Errorf("xla: device-to-host transfer of %s: %w", t.shape, err)
	}
	metrics.transferToHost(int64(t.shape.Memory()))
	return host, nil
}

// Values returns the flat values, converted to T.
func Values[T dtypes.Supported](ctx context.Context, t *Tensor) ([]T, error) {
	host, err := t.toHost(ctx)
	if err != nil {
		return nil, err
	}
	if host.DType() != dtypes.FromGoType(reflect.TypeFor[T]()) {
		return nil, fmt.Errorf("xla: Values[%s] of a %s tensor: Cast it first", dtypes.FromGoType(reflect.TypeFor[T]()), t.shape)
	}
	flat, err := tensors.CopyFlatData[T](host)
	if err == nil && flat == nil {
		flat = []T{} // a zero-size tensor reads as an empty, non-nil slice
	}
	return flat, err
}

// Float32s returns the flat values of a Float32 tensor.
func (t *Tensor) Float32s(ctx context.Context) ([]float32, error) { return Values[float32](ctx, t) }

// Item returns the value of a one-element tensor as float64.
func (t *Tensor) Item(ctx context.Context) (float64, error) {
	if t.err != nil {
		return 0, t.err
	}
	if t.shape.Size() != 1 {
		return 0, fmt.Errorf("xla: Item of %s: needs exactly one element", t.shape)
	}
	host, err := t.toHost(ctx)
	if err != nil {
		return 0, err
	}
	var v float64
	err = host.ConstFlatData(func(flat any) { v = flatAsFloat64(flat) })
	return v, err
}

func flatAsFloat64(flat any) float64 {
	switch f := flat.(type) {
	case []float32:
		return float64(f[0])
	case []float64:
		return f[0]
	case []bfloat16.BFloat16:
		return float64(f[0].Float32())
	case []int32:
		return float64(f[0])
	case []int64:
		return float64(f[0])
	case []uint64:
		return float64(f[0])
	case []bool:
		if f[0] {
			return 1
		}
		return 0
	}
	panic(fmt.Sprintf("xla: Item of element type %T is not supported", flat))
}

// FromBytes copies raw little-endian host data of dtype and dims to d.
func FromBytes(d *Device, dtype DType, dims []int, data []byte) (*Tensor, error) {
	shape, err := checkDims("FromBytes", dtype, dims)
	if err != nil {
		return nil, err
	}
	if want := shape.Memory(); uintptr(len(data)) != want {
		return nil, fmt.Errorf("xla: FromBytes: %d bytes for %s (want %d)", len(data), shape, want)
	}
	if shape.Size() == 0 {
		return d.empty(shape), nil
	}
	dd, err := d.uploadBytes(shape, data)
	if err != nil {
		return nil, err
	}
	return d.noteCreated(&Tensor{dev: d, shape: dd.shape, data: dd}), nil
}

// uploadBytes copies data straight into a new device buffer of shape: the
// plugin reads the caller's bytes during the call (PJRT's
// kImmutableOnlyDuringCall), with no host tensor in between.
func (d *Device) uploadBytes(shape shapes.Shape, data []byte) (*deviceData, error) {
	release, err := d.engine.enter("host-to-device transfer")
	if err != nil {
		return nil, err
	}
	defer release()
	n := shape.Size()
	flat := reflect.NewAt(reflect.ArrayOf(n, shape.DType.GoType()), unsafe.Pointer(unsafe.SliceData(data))).Elem().Slice(0, n).Interface()
	buf, err := d.engine.gomlx.BufferFromFlatData(compute.DeviceNum(d.num), flat, shape)
	if err != nil {
		return nil, fmt.Errorf("xla: host-to-device transfer of %s to %s: %w", shape, d, err)
	}
	t, err := tensors.FromBuffer(buf)
	if err != nil {
		return nil, fmt.Errorf("xla: host-to-device transfer of %s to %s: %w", shape, d, err)
	}
	metrics.transferToDevice(int64(len(data)))
	d.engine.buffers.made(int64(len(data)))
	return &deviceData{tensor: t, shape: shape}, nil
}

// Bytes returns the value's raw little-endian bytes, running a MarkStep
// first if it is pending.
func (t *Tensor) Bytes(ctx context.Context) ([]byte, error) {
	host, err := t.toHost(ctx)
	if err != nil {
		return nil, err
	}
	if t.shape.IsZeroSize() {
		return []byte{}, nil // GoMLX's ConstBytes indexes element 0
	}
	var out []byte
	err = host.ConstBytes(func(b []byte) { out = append([]byte(nil), b...) })
	return out, err
}

// CopyBytesTo copies the value's raw little-endian bytes into dst, which
// must be exactly its size, running a MarkStep first if it is pending. It
// writes straight from the device buffer, with no intermediate copy (a
// DDP gradient bucket is filled this way). A handle of a computed value
// that no other goroutine uses (a To copy) may be read so on another
// goroutine while its device runs later steps.
func (t *Tensor) CopyBytesTo(ctx context.Context, dst []byte) error {
	if want := t.shape.Memory(); uintptr(len(dst)) != want {
		return fmt.Errorf("xla: CopyBytesTo of %s into %d bytes (want %d)", t.shape, len(dst), want)
	}
	if err := t.materialize(ctx); err != nil {
		return err
	}
	if t.shape.IsZeroSize() {
		return nil
	}
	release, err := t.dev.engine.enter("device-to-host transfer")
	if err != nil {
		return err
	}
	defer release()
	if err := t.data.copyToHost(t.dev, dst); err != nil {
		if stepErr := t.dev.lastStepError(); stepErr != nil {
			return stepErr
		}
		return fmt.Errorf("xla: device-to-host transfer of %s: %w", t.shape, err)
	}
	metrics.transferToHost(int64(len(dst)))
	return nil
}

// To returns a copy of t on device d (torch's t.to(device)), running a
// MarkStep first if t is pending. Ops need all operands on one device.
func (t *Tensor) To(ctx context.Context, d *Device) (*Tensor, error) {
	if d == t.dev {
		if err := t.materialize(ctx); err != nil {
			return nil, err
		}
		c := &Tensor{dev: d, shape: t.shape, data: t.data}
		t.data.exclusive = false
		d.observer.noteAlias(c, t)
		return c, nil
	}
	if d.engine != t.dev.engine {
		return nil, fmt.Errorf("xla: To(%s) of a tensor on %s: the devices belong to different engines", d, t.dev)
	}
	host, err := t.toHost(ctx)
	if err != nil {
		return nil, err
	}
	dd, err := d.upload(host)
	if err != nil {
		return nil, err
	}
	return d.noteCreated(&Tensor{dev: d, shape: dd.shape, data: dd}), nil
}

// readHost copies the buffer to the host once the execution computing it
// (possibly still running) finished.
func (dd *deviceData) readHost(d *Device) (*tensors.Tensor, error) {
	if !dd.shape.IsZeroSize() {
		if _, err := dd.ready(d); err != nil {
			return nil, err
		}
	} else if dd.donated {
		return nil, errDonated
	}
	return dd.tensor.LocalClone()
}

// copyToHost copies the buffer into dst once it is computed.
func (dd *deviceData) copyToHost(d *Device, dst []byte) error {
	pb, err := dd.ready(d)
	if err != nil {
		return err
	}
	return pb.ToHost(dst)
}

// ready returns the PJRT buffer once the execution computing it (possibly
// still running) finished.
func (dd *deviceData) ready(d *Device) (*pjrt.Buffer, error) {
	if dd.donated {
		return nil, errDonated
	}
	buf, err := dd.tensor.Buffer(d.engine.gomlx, compute.DeviceNum(d.num))
	if err != nil {
		return nil, err
	}
	pb, err := d.engine.backend.PJRTBuffer(buf)
	if err != nil {
		return nil, err
	}
	if err := d.engine.backend.AwaitReady(buf); err != nil {
		return nil, err
	}
	// A value the last step computed finishes that step: it lets go of the
	// step's inputs and reports its failure by step. A value an earlier
	// step computed (a loss read one step late) does not wait for the last.
	if last := d.lastStep.Load(); last != nil && last == dd.producer {
		if err := last.wait(); err != nil {
			return nil, err
		}
	}
	return pb, nil
}

// DeviceBytes returns the size of t's buffer as the PJRT plugin reports
// it, computing t first if it is pending: what t holds on its device, not
// what its shape says it should.
func (t *Tensor) DeviceBytes(ctx context.Context) (int64, error) {
	if err := t.materialize(ctx); err != nil {
		return 0, err
	}
	if t.shape.IsZeroSize() {
		return 0, nil
	}
	pb, err := t.data.ready(t.dev)
	if err != nil {
		return 0, fmt.Errorf("xla: DeviceBytes of %s: %w", t.shape, err)
	}
	n, err := pb.Size()
	if err != nil {
		return 0, fmt.Errorf("xla: DeviceBytes of %s: %w", t.shape, err)
	}
	return int64(n), nil
}
