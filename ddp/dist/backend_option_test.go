package dist

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBackendOption: the backend comes from Options or $XLADDP_BACKEND,
// in any case and spacing; anything else is refused with the choices.
func TestBackendOption(t *testing.T) {
	for _, tc := range []struct {
		env, given, want, wantErr string
	}{
		{want: TransportTCP},
		{env: "tcp", want: TransportTCP},
		{env: " MPI ", want: TransportMPI},
		{given: "Mpi", want: TransportMPI},
		{env: "mpi", given: "tcp", want: TransportTCP},
		{env: "nccl", wantErr: `backend "nccl": want tcp (the default) or mpi ($XLADDP_BACKEND)`},
		{given: "gloo", wantErr: `backend "gloo": want tcp`},
	} {
		t.Run(tc.env+"/"+tc.given, func(t *testing.T) {
			t.Setenv(EnvTransport, tc.env)
			t.Setenv(EnvRank, "0")
			t.Setenv(EnvWorldSize, "1")
			o := NewOptions()
			if tc.given != "" {
				o.Transport = tc.given
			}
			err := o.resolve()
			if tc.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, o.Transport)
		})
	}
}

// TestFlightSizeOption: the flight record's size comes from Options or
// $XLADDP_FLIGHT_SIZE (0 turns it off); a malformed, negative or huge
// size is refused with what to give.
func TestFlightSizeOption(t *testing.T) {
	for _, tc := range []struct {
		env         string
		given, want int
		wantErr     string
	}{
		{want: 2048},
		{env: " 64 ", want: 64},
		{env: "0", want: -1},
		{given: -1, want: -1},
		{env: "8", given: 16, want: 16},
		{env: "many", wantErr: `$XLADDP_FLIGHT_SIZE="many": want how many operations the flight record keeps, at most 1048576 (default 2048; 0 turns it off)`},
		{env: "-3", wantErr: `$XLADDP_FLIGHT_SIZE="-3"`},
		{env: "9223372036854775808", wantErr: `$XLADDP_FLIGHT_SIZE="9223372036854775808"`},
		{env: "1048577", wantErr: `$XLADDP_FLIGHT_SIZE="1048577": want how many operations the flight record keeps, at most 1048576`},
		{given: 1 << 40, wantErr: "too large"},
	} {
		t.Run(tc.env, func(t *testing.T) {
			o, ok := resolvedWith(t, EnvFlightSize, tc.env, func(o *Options) { o.FlightSize = tc.given }, tc.wantErr)
			if ok {
				assert.Equal(t, tc.want, o.FlightSize)
			}
		})
	}
}

// TestTimeoutOption: the group's timeout comes from Options, else
// $XLADDP_TIMEOUT (ddprun --timeout sets it; a duration or seconds),
// else DefaultTimeout; zero, negative, NaN, garbage or more than a day is
// refused with what to give.
func TestTimeoutOption(t *testing.T) {
	for _, tc := range []struct {
		env     string
		given   time.Duration
		want    time.Duration
		wantErr string
	}{
		{want: DefaultTimeout},
		{env: "90s", want: 90 * time.Second},
		{env: " 2.5 ", want: 2500 * time.Millisecond},
		{env: "15m", given: time.Second, want: time.Second},
		{env: "0", wantErr: `$XLADDP_TIMEOUT="0": give the collective timeout as a duration (90s, 15m) or seconds, above 0 and at most 24h0m0s`},
		{env: "-5s", wantErr: `$XLADDP_TIMEOUT="-5s"`},
		{env: "NaN", wantErr: `$XLADDP_TIMEOUT="NaN"`},
		{env: "soon", wantErr: `$XLADDP_TIMEOUT="soon"`},
		{env: "25h", wantErr: `$XLADDP_TIMEOUT="25h"`},
		{env: "1e300", wantErr: `$XLADDP_TIMEOUT="1e300"`},
	} {
		t.Run(tc.env, func(t *testing.T) {
			o, ok := resolvedWith(t, EnvTimeout, tc.env, func(o *Options) { o.Timeout = tc.given }, tc.wantErr)
			if ok {
				assert.Equal(t, tc.want, o.Timeout)
			}
		})
	}
}

// resolvedWith resolves a rank-0-of-1 job's Options with $env=value and
// set applied to NewOptions; it checks the error against wantErr (none
// when empty) and reports whether the options resolved.
func resolvedWith(t *testing.T, env, value string, set func(*Options), wantErr string) (Options, bool) {
	t.Helper()
	t.Setenv(env, value)
	t.Setenv(EnvRank, "0")
	t.Setenv(EnvWorldSize, "1")
	o := NewOptions()
	set(&o)
	err := o.resolve()
	if wantErr != "" {
		require.Error(t, err)
		assert.Contains(t, err.Error(), wantErr)
		return o, false
	}
	require.NoError(t, err)
	return o, true
}
