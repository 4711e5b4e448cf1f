package nn

import (
	"context"
	"testing"

	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/xlatest"
)

func newEngine(t testing.TB, n int) *xla.Engine { return xlatest.NewEngine(t, n) }

func testContext(t testing.TB) context.Context { return xlatest.Context(t) }
