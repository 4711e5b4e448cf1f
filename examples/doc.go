// Package examples holds runnable xladdp programs, one directory each:
//
//   - toy: the Neuron DDP tutorial (10→10→5 MLP), spawned or under ddprun.
//   - mnist: the smdistributed.dataparallel MNIST CNN (what `make demo` runs).
//   - cifar10: the HPC tutorial's ResNet-18 on CIFAR-10, with a --no-ddp baseline.
//   - linear: the MPI/SageMaker CPU example (random data, linear model).
//   - collectives: the MPI basics demo on the process group.
//   - sagemaker: the SageMaker entry point that hands the job to ddprun.
//   - devicecollectives: all-reduces values across the local devices in one
//     compiled SPMD program.
//   - internal/report: the progress bar, summary and plots the training
//     examples share.
//   - bench: the benchmarks against JAX, torch-xla, PyTorch and Open MPI.
package examples
