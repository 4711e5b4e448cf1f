package progshare

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestSharePrograms(t *testing.T) {
	for v, want := range map[string]bool{"": true, "on": true, " TRUE ": true, "1": true, "off": false, "0": false, "False": false} {
		got, err := Enabled(v)
		assert.NoError(t, err, v)
		assert.Equal(t, want, got, v)
	}
	_, err := Enabled("maybe")
	assert.ErrorContains(t, err, `$XLADDP_SHARE_PROGRAMS="maybe": want on or off`)
}
