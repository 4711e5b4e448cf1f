package checkpoint_test

import (
	"testing"

	"github.com/xladdp/xladdp/ddp/internal/ddptest"
)

func TestMain(m *testing.M) { ddptest.Main(m) }
