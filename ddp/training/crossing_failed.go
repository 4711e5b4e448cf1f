package training

import "github.com/xladdp/xladdp/xla"

// crossingFailed is what TrainStep does when the gradients could not be
// combined across the replicas: the step fails, and no update is
// applied. (The tests' xladdp_early_update build replaces it with the
// bug the loss of a peer must never meet, to show that they catch it;
// it needs a loss to return, which lossOf traces.)
var crossingFailed = func(lossOf func() *xla.Tensor, err error) (*xla.Tensor, error) { return nil, err }
