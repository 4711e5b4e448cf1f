package pjrtx

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/go-xla/stablehlo"
	xlashapes "github.com/gomlx/go-xla/types/shapes"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFFICustomCallGolden: the typed-FFI custom call as the pinned
// go-xla prints it (testdata/ffi_custom_call.mlir): API version 4, the
// attribute dictionary as backend_config, the operands and result types.
// go-xla builds custom calls of API version 2 only, so this is built on
// its statement's attributes (an unexported field reaches the statement):
// an upgrade that changes either fails here, loudly, before any program
// is compiled wrong. Rewrite the file with XLADDP_UPDATE_GOLDEN=1 only
// after reading the difference.
func TestFFICustomCallGolden(t *testing.T) {
	b := stablehlo.New("golden")
	fn := b.Main()
	x, err := fn.NamedInput("x", xlashapes.Make(dtypes.Float32, 2, 8, 8, 4))
	require.NoError(t, err)
	w, err := fn.NamedInput("w", xlashapes.Make(dtypes.Float32, 3, 3, 4, 16))
	require.NoError(t, err)
	y, err := ffiCustomCall("xladdp_onednn_conv_forward", "{pad_hi = array<i64: 1, 1>, pad_lo = array<i64: 1, 1>, stride = array<i64: 1, 1>}",
		[]*stablehlo.Value{x, w}, xlashapes.Make(dtypes.Float32, 2, 8, 8, 16))
	require.NoError(t, err)
	require.NoError(t, fn.Return(y))
	program, err := b.Build()
	require.NoError(t, err)

	golden := filepath.Join("testdata", "ffi_custom_call.mlir")
	if os.Getenv("XLADDP_UPDATE_GOLDEN") == "1" {
		require.NoError(t, os.WriteFile(golden, program, 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err)
	assert.Equal(t, string(want), string(program), "go-xla %s prints the custom call otherwise: read the difference", pinnedGoXLA)
}
