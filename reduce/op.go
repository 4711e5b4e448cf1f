package reduce

import "fmt"

// Op combines values across replicas or ranks. The zero Op is invalid,
// so a forgotten op is an error rather than a silent sum.
type Op int

const (
	Sum Op = iota + 1
	// Avg is the sum divided by the number of contributions.
	Avg
	Min
	Max
	Product
)

var names = map[Op]string{Sum: "SUM", Avg: "AVG", Min: "MIN", Max: "MAX", Product: "PRODUCT"}

// String names the op as torch.distributed does.
func (op Op) String() string {
	if n, ok := names[op]; ok {
		return n
	}
	return fmt.Sprintf("reduce.Op(%d)", int(op))
}

// Valid reports whether op is one of Sum, Avg, Min, Max and Product.
func (op Op) Valid() bool {
	_, ok := names[op]
	return ok
}
