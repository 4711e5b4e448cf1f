// Package examples holds runnable xladdp programs, one directory each:
//
//   - mnist: data-parallel MNIST training on N local replicas with in-graph
//     gradient all-reduce (what `make demo` runs).
//   - devicecollectives: all-reduces values across the local devices in one
//     compiled SPMD program.
//
// The seed tutorials (Neuron DDP, SageMaker DDP, CIFAR-10 ResNet-18, MNIST)
// and the peer benchmarks under examples/bench arrive with their issues.
package examples
