package xla

import (
	"context"
	"fmt"
	"io"
	"reflect"
)

// Format lets fmt print a tensor's values, as torch's print does: the
// floating-point verbs (%f, %e, %g and their upper-case forms, with
// width and precision) read the value (running a MarkStep first if it is
// pending) and print a one-element tensor as a number and any other as
// [v0 v1 ...]; every other verb prints String, which computes nothing. A
// value that cannot be read prints as %!f(the error), so printing never
// fails a program.
func (t *Tensor) Format(f fmt.State, verb rune) {
	if t == nil {
		_, _ = io.WriteString(f, "<nil tensor>")
		return
	}
	switch verb {
	case 'f', 'F', 'e', 'E', 'g', 'G':
	default:
		_, _ = io.WriteString(f, t.String())
		return
	}
	if err := t.formatValues(f, fmt.FormatString(f, verb)); err != nil {
		fmt.Fprintf(f, "%%!%c(%v)", verb, err)
	}
}

func (t *Tensor) formatValues(w io.Writer, format string) error {
	host, err := t.toHost(context.Background())
	if err != nil {
		return err
	}
	var values []float64
	err = host.ConstFlatData(func(flat any) { values, err = floats(flat) })
	if err != nil {
		return err
	}
	if len(values) == 1 && t.shape.Size() == 1 {
		fmt.Fprintf(w, format, values[0])
		return nil
	}
	_, _ = io.WriteString(w, "[")
	for i, v := range values {
		if i > 0 {
			_, _ = io.WriteString(w, " ")
		}
		fmt.Fprintf(w, format, v)
	}
	_, _ = io.WriteString(w, "]")
	return nil
}

// floats converts a flat slice of any element type to float64.
func floats(flat any) ([]float64, error) {
	v := reflect.ValueOf(flat)
	if v.Kind() != reflect.Slice {
		return nil, fmt.Errorf("xla: cannot print values held as %T", flat)
	}
	out := make([]float64, v.Len())
	for i := range out {
		e := v.Index(i)
		// Half-precision types are integers underneath: their Float32
		// method comes first.
		if m := e.MethodByName("Float32"); m.IsValid() && m.Type().NumIn() == 0 && m.Type().NumOut() == 1 &&
			m.Type().Out(0).Kind() == reflect.Float32 {
			out[i] = m.Call(nil)[0].Float()
			continue
		}
		switch {
		case e.CanFloat():
			out[i] = e.Float()
		case e.CanInt():
			out[i] = float64(e.Int())
		case e.CanUint():
			out[i] = float64(e.Uint())
		case e.Kind() == reflect.Bool:
			if e.Bool() {
				out[i] = 1
			}
		default:
			return nil, fmt.Errorf("xla: cannot print values of type %s", e.Type())
		}
	}
	return out, nil
}
