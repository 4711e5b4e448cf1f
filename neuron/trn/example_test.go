package trn_test

import (
	"fmt"
	"log"

	"github.com/xladdp/xladdp/neuron/trn"
)

// NEURON_RT_VISIBLE_CORES takes single cores and ranges.
func ExampleParseCoreList() {
	cores, err := trn.ParseCoreList("0-3,8")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(cores)
	// Output: [0 1 2 3 8]
}

// What a torchrun-style worker (local rank 1 of 2 on one node) gets set
// before the plugin loads: its own NeuronCore, as torch-neuronx sets it.
func ExampleEnvironment() {
	job := trn.Job{Mode: trn.Run, Rank: 1, WorldSize: 2, LocalRank: 1, LocalWorldSize: 2, LocalDevices: 1}
	env, err := trn.Environment(job, func(string) string { return "" })
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(env["NEURON_RT_VISIBLE_CORES"], env["NEURON_RT_ROOT_COMM_ID"])
	// Output: 1 localhost:62182
}
