// Package sagemaker holds the SageMaker notebook's launcher as it becomes
// with xladdp: the entry point script `train`, which hands the job to
// ddprun (it detects SageMaker's cluster itself), and its test. See
// docs/clusters.md.
package sagemaker
