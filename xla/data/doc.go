// Package data feeds training: the Dataset interface, samplers, and a
// Loader that assembles batches in background goroutines and copies them to
// the device ahead of use (torch-xla's MpDeviceLoader), so in steady state
// the device never waits on input. Formats: MNIST idx files (raw or .gz,
// also Fashion-MNIST), CIFAR-10 binary batches, ImageFolder directories of
// JPEG/PNG images with torchvision-style transforms, and random tensors.
//
// A malformed file is an error naming the file and the offset or record;
// an unreadable image names the image.
package data
