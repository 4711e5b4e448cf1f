package pjrtx

import (
	"context"
	"reflect"
	"sync"
	"testing"

	gomlxxla "github.com/gomlx/go-xla/compute/xla"
	"github.com/gomlx/go-xla/pjrt"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fieldNames lists the fields of T, in order.
func fieldNames[T any]() []string {
	t := reflect.TypeFor[T]()
	names := make([]string, t.NumField())
	for i := range names {
		names[i] = t.Field(i).Name
	}
	return names
}

// TestNewBackendIsGoXLAs: NewBackend assembles go-xla's compute backend
// and client as xla.NewWithOptions and pjrt's newClient do, field for
// field (the client's own C pointer and device wrappers aside), on the
// real CPU plugin; the structs have exactly the fields it sets, so an
// upgrade that adds one fails here instead of leaving it zero.
func TestNewBackendIsGoXLAs(t *testing.T) {
	assert.Equal(t, []string{"plugin", "client", "config", "pluginName", "hasSharedBuffers", "capabilities", "numDevices", "DotGeneralUseTF32"},
		fieldNames[gomlxxla.Backend](), "the fields NewBackend sets")
	assert.Equal(t, []string{"plugin", "client", "platform", "platformVersion", "processIndex", "addressableDevices", "allowBufferViews"},
		fieldNames[pjrt.Client](), "the fields wrapClient sets (allowBufferViews: go-xla leaves it false)")

	path := installedCPUPlugin(t)
	options := map[string]any{"cpu_device_count": int64(2)}
	gomlxxla.EnableAutoInstall(false)
	want, err := gomlxxla.NewWithOptions(path+",shared_buffers", options)
	require.NoError(t, err)
	defer want.Finalize()
	got, gotClient, err := NewBackend(path, BackendOptions{Options: options, SharedBuffers: true})
	require.NoError(t, err)
	defer got.Finalize()

	wv, gv := reflect.ValueOf(want).Elem(), reflect.ValueOf(got).Elem()
	for i := range wv.NumField() {
		name := wv.Type().Field(i).Name
		if name == "client" {
			continue
		}
		assert.True(t, reflect.DeepEqual(fieldValue(t, wv, name), fieldValue(t, gv, name)), "Backend.%s", name)
	}
	wc, err := ClientOf(want)
	require.NoError(t, err)
	gc, err := ClientOf(got)
	require.NoError(t, err)
	assert.Same(t, gotClient, gc, "NewBackend returns its backend's client")
	cw, cg := reflect.ValueOf(wc).Elem(), reflect.ValueOf(gc).Elem()
	for _, name := range []string{"plugin", "platform", "platformVersion", "processIndex", "allowBufferViews"} {
		assert.True(t, reflect.DeepEqual(fieldValue(t, cw, name), fieldValue(t, cg, name)), "Client.%s", name)
	}
	require.Len(t, gc.AddressableDevices(), 2)
	for i, d := range gc.AddressableDevices() {
		assert.Equal(t, wc.AddressableDevices()[i].LocalHardwareID(), d.LocalHardwareID())
	}
	assert.Equal(t, "cpu", gc.Platform())
}

// fieldValue reads an unexported field's value.
func fieldValue(t *testing.T, v reflect.Value, name string) any {
	t.Helper()
	f := v.FieldByName(name)
	require.True(t, f.IsValid(), name)
	return reflect.NewAt(f.Type(), f.Addr().UnsafePointer()).Elem().Interface()
}

// recordingKV is a KeyValue that records the plugin's calls.
type recordingKV struct {
	mu    sync.Mutex
	calls []string
}

func (r *recordingKV) record(call string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, call)
}

func (r *recordingKV) Get(_ context.Context, key string) ([]byte, error) {
	r.record("get " + key)
	return nil, nil
}

func (r *recordingKV) TryGet(_ context.Context, key string) ([]byte, bool, error) {
	r.record("try-get " + key)
	return nil, false, nil
}

func (r *recordingKV) Put(_ context.Context, key string, _ []byte) error {
	r.record("put " + key)
	return nil
}

// TestCPUPluginTakesTheCallbacks: the CPU plugin creates its client with
// the key-value callbacks given and, alone in its process, calls none of
// them; destroying the client twice (go-xla's Destroy, then the cleanup)
// is safe.
func TestCPUPluginTakesTheCallbacks(t *testing.T) {
	kv := &recordingKV{}
	b, client, err := NewBackend(installedCPUPlugin(t), BackendOptions{Options: map[string]any{"cpu_device_count": int64(1)}, KeyValue: kv, HasKeyValue: true})
	require.NoError(t, err)
	assert.Equal(t, 1, client.NumDevices())
	b.Finalize()
	kv.mu.Lock()
	defer kv.mu.Unlock()
	assert.Empty(t, kv.calls)
}
