package ddp_test

import (
	"fmt"
	"log"

	"github.com/xladdp/xladdp/ddp"
)

// Ten samples over three replicas without shuffling, as torch's
// DistributedSampler pads them: every replica gets ceil(10/3) = 4, the
// last wrapping around to the first samples.
func ExampleNewDistributedSampler() {
	for rank := range 3 {
		s, err := ddp.NewDistributedSampler(10, ddp.SamplerReplicas(3, rank), ddp.NoShuffle())
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(rank, s.Indices(0))
	}
	// Output:
	// 0 [0 3 6 9]
	// 1 [1 4 7 0]
	// 2 [2 5 8 1]
}
