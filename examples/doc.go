// Package examples holds runnable xladdp programs, one directory each:
//
//   - devicecollectives: all-reduces values across the local devices in one
//     compiled SPMD program (what `make demo` runs today).
//
// The seed tutorials (Neuron DDP, SageMaker DDP, CIFAR-10 ResNet-18, MNIST)
// and the peer benchmarks under examples/bench arrive with their issues.
package examples
