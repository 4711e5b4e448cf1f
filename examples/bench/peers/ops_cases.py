"""The per-op table's rows (examples/bench/ops/cases.go), for the JAX and
PyTorch runners: name, then each input as (shape at batch b, grad?) or
"labels"; the op comes from the runner's own library."""

import time

CONV1 = "conv1 1->32 3x3 on 28x28 (dW)"
CONV2 = "conv2 32->64 3x3 on 26x26 (dX, dW)"
CONV2_DX = "conv2 32->64 3x3 on 26x26 (dX)"
CONV2_DW = "conv2 32->64 3x3 on 26x26 (dW)"
RELU = "relu on 64x24x24"
POOL = "max_pool2d 2x2 on 64x24x24"
DROPOUT = "dropout 0.25 on 64x12x12"
FC1 = "linear 9216->128"
FC2 = "linear 128->10"
NLL = "log_softmax+nll over 10"
ADADELTA = "adadelta update, MNIST CNN params"

CNN_PARAM_SHAPES = [(32, 1, 3, 3), (32,), (64, 32, 3, 3), (64,), (128, 9216), (128,), (10, 128), (10,)]


def inputs(name, b):
    return {
        CONV1: [((b, 1, 28, 28), False), ((32, 1, 3, 3), True), ((32,), True)],
        CONV2: [((b, 32, 26, 26), True), ((64, 32, 3, 3), True), ((64,), True)],
        CONV2_DX: [((b, 32, 26, 26), True), ((64, 32, 3, 3), False), ((64,), False)],
        CONV2_DW: [((b, 32, 26, 26), False), ((64, 32, 3, 3), True), ((64,), True)],
        RELU: [((b, 64, 24, 24), True)],
        POOL: [((b, 64, 24, 24), True)],
        DROPOUT: [((b, 64, 12, 12), True)],
        FC1: [((b, 9216), True), ((9216, 128), True), ((128,), True)],
        FC2: [((b, 128), True), ((128, 10), True), ((10,), True)],
        NLL: [((b, 10), True), "labels"],
    }[name]


ROWS = [CONV1, CONV2, CONV2_DX, CONV2_DW, RELU, POOL, DROPOUT, FC1, FC2, NLL]


def timed(call, samples, calls, wait=lambda result: result):
    """ms per call of call() (wait()ed on), per sample, after two untimed calls."""
    for _ in range(2):
        wait(call())
    times = []
    for _ in range(samples):
        start = time.perf_counter()
        for _ in range(calls):
            wait(call())
        times.append((time.perf_counter() - start) * 1000 / calls)
    return times
