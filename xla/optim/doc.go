// Package optim holds torch-style optimizers (SGD with momentum, dampening,
// Nesterov and weight decay; Adam; AdamW, with parameter groups of their
// own weight decay (NewAdamWGroups, DecayGroups); Adadelta), learning-rate
// schedulers (StepLR, CosineAnnealingLR, LinearWarmup, WarmupCosine),
// ClipGradNorm (torch.nn.utils.clip_grad_norm_, inside the step's
// program: no host read, no recompilation) and training
// checkpoints (model, optimizer state, step and epoch in one safetensors
// file, written atomically).
//
// Step records the update lazily like any xla op. Optimizer state lives on
// the device and is created when the optimizer is built, so the first step
// traces the same program as every later one (one compilation); torch's
// first-step special cases become in-graph selects on the step count. The
// learning rate is fed as a program input, so schedulers never recompile.
// Scaling the learning rate by the world size is the caller's choice.
package optim
