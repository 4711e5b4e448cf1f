// Package nn holds torch-style layers, losses and models on lazy xla
// tensors: Linear, Conv2d, BatchNorm2d, ReLU, MaxPool2d, AvgPool2d,
// AdaptiveAvgPool2d, Dropout, Flatten, Sequential; the transformer's
// Embedding, LayerNorm, GELU (exact and tanh), MultiheadAttention (causal
// or with torch's boolean mask), the pre-LN Block and a GPT with learned
// positions and a head tied to its embedding; MSELoss, CrossEntropyLoss,
// NLLLoss; ResNet-18 with torchvision's layout and parameter names.
//
// SetComputeDType is the mixed-precision policy (torch's autocast for one
// model): matmuls and activations in bf16, parameters, norms, softmax and
// losses in float32.
//
// A Module lists its own parameters, buffers and children in registration
// order, so NamedParameters and StateDict give torch's names and order
// ("layer1.0.bn1.running_mean"). Parameters are initialised on the host
// with torch's default schemes from a seeded generator, so every replica
// built with the same seed starts identical, and uploaded once; nothing
// executes until the first MarkStep. Train and Eval switch BatchNorm and
// Dropout between their modes.
//
// Every constructor that can be given impossible sizes returns (layer,
// error) and checks them at once (NewLinear, NewConv2d, NewBatchNorm2d,
// NewDropout, NewMaxPool2d, NewAvgPool2d, NewResNet18). Dense is
// NewLinear for a model written as one expression: its error stays in the
// layer (Err), Sequential's Err, Wrap and the optimizers report it, and
// Forward returns it in its result.
package nn
