package backend_test

import (
	"context"
	"fmt"
	"log"

	"github.com/xladdp/xladdp/backend"
)

// torch-xla's spellings are accepted in any case.
func ExampleParseTarget() {
	for _, name := range []string{"CPU", "gpu", "cuda"} {
		t, err := backend.ParseTarget(name)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(name, "->", t)
	}
	// Output:
	// CPU -> cpu
	// gpu -> cuda
	// cuda -> cuda
}

// Open the CPU plugin (make deps installs it) with two virtual devices.
func ExampleOpen() {
	b, err := backend.Open(context.Background(), backend.Options{Target: backend.CPU, CPUDevices: 2})
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	fmt.Println(b.Target(), b.NumDevices())
	// Output: cpu 2
}
