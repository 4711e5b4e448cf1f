package dist

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBackendOption: the backend comes from Options or $XLADDP_BACKEND,
// in any case and spacing; anything else is refused with the choices.
func TestBackendOption(t *testing.T) {
	for _, tc := range []struct {
		env, given, want, wantErr string
	}{
		{want: BackendTCP},
		{env: "tcp", want: BackendTCP},
		{env: " MPI ", want: BackendMPI},
		{given: "Mpi", want: BackendMPI},
		{env: "mpi", given: "tcp", want: BackendTCP},
		{env: "nccl", wantErr: `backend "nccl": want tcp (the default) or mpi ($XLADDP_BACKEND)`},
		{given: "gloo", wantErr: `backend "gloo": want tcp`},
	} {
		t.Run(tc.env+"/"+tc.given, func(t *testing.T) {
			t.Setenv(EnvBackend, tc.env)
			t.Setenv(EnvRank, "0")
			t.Setenv(EnvWorldSize, "1")
			o := NewOptions()
			if tc.given != "" {
				o.Backend = tc.given
			}
			err := o.resolve()
			if tc.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, o.Backend)
		})
	}
}
