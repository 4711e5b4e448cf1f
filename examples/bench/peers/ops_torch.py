"""PyTorch (Debian's 1.13, eager) side of the per-op table
(examples/bench/ops): each row's forward (loss = sum(op(inputs) *
cotangent)) and forward and backward, at the batch --batch, and one
Adadelta update of the CNN's parameters; one JSON line per row. Run it
with one thread on one core for the one-core table:
    OMP_NUM_THREADS=1 taskset -c 0 python3 ops_torch.py --threads 1"""

import argparse
import json
import statistics

import torch
import torch.nn.functional as F

import ops_cases as oc

OPS = {
    oc.CONV1: lambda x, w, b: F.conv2d(x, w, b),
    oc.CONV2: lambda x, w, b: F.conv2d(x, w, b),
    oc.CONV2_DX: lambda x, w, b: F.conv2d(x, w, b),
    oc.CONV2_DW: lambda x, w, b: F.conv2d(x, w, b),
    oc.RELU: F.relu,
    oc.POOL: lambda x: F.max_pool2d(x, 2),
    oc.DROPOUT: lambda x: F.dropout(x, 0.25, training=True),
    oc.FC1: lambda x, w, b: x @ w + b,
    oc.FC2: lambda x, w, b: x @ w + b,
    oc.NLL: lambda x, y: F.nll_loss(F.log_softmax(x, 1), y),
}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--samples", type=int, default=7)
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--only", default="")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    gen = torch.Generator().manual_seed(1)
    runner = f"torch {torch.__version__} eager, {a.threads} thread(s)"

    def emit(op, pass_, times):
        print(json.dumps({"runner": runner, "op": op, "pass": pass_, "batch": a.batch, "call_ms": times,
                          "median_ms": statistics.median(times)}), flush=True)

    for name in oc.ROWS:
        if a.only and a.only not in name:
            continue
        for backward in (False, True):
            ins = []
            for spec in oc.inputs(name, a.batch):
                if spec == "labels":
                    ins.append(torch.randint(0, 10, (a.batch,), generator=gen))
                    continue
                shape, grad = spec
                ins.append(torch.randn(*shape, generator=gen).requires_grad_(backward and grad))
            op = OPS[name]
            cot = torch.randn(op(*ins).shape, generator=gen)

            def call():
                loss = (op(*ins) * cot).sum()
                if backward:
                    for t in ins:
                        t.grad = None
                    loss.backward()
                return loss.item()

            if not backward:
                with torch.no_grad():
                    emit(name, "forward", oc.timed(call, a.samples, a.calls))
            else:
                emit(name, "forward+backward", oc.timed(call, a.samples, a.calls))
    if not a.only or a.only in oc.ADADELTA:
        params = [torch.randn(*s, generator=gen).requires_grad_() for s in oc.CNN_PARAM_SHAPES]
        for q in params:
            q.grad = torch.randn(q.shape, generator=gen)
        opt = torch.optim.Adadelta(params, lr=1.0)
        emit(oc.ADADELTA, "update", oc.timed(opt.step, a.samples, a.calls))


if __name__ == "__main__":
    main()
