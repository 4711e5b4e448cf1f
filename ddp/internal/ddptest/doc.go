// Package ddptest is the training harness of the tests of package ddp and
// package ddp/zero: the test models ("toy", "branch", "wide", "cnn",
// "gpt") on a fixed global batch, their optimizer recipes, a training
// loop that runs plain, wrapped (ddp.Wrap) or sharded (zero.New), and
// the multi-process "equivalence" scenario both packages' tests launch.
package ddptest
