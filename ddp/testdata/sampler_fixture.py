"""Writes distributed_sampler_torch.json: torch.utils.data.DistributedSampler's
indices per rank for a grid of cases, the fixture ddp's DistributedSampler
must reproduce. Run with Debian's python3-torch (1.13):

    /usr/bin/python3 ddp/testdata/sampler_fixture.py > ddp/testdata/distributed_sampler_torch.json
"""
import hashlib
import json

import torch
from torch.utils.data import DistributedSampler

cases = []
for n in [0, 1, 7, 10, 33, 1000, 60000]:
    for replicas in [1, 3, 4]:
        for seed in [0, 42, 2**32 + 5]:
            for epoch in [0, 3]:
                for shuffle in [True, False]:
                    for drop_last in [False, True]:
                        if n == 60000 and (replicas != 4 or seed != 42 or not shuffle):
                            continue
                        ranks = []
                        for rank in range(replicas):
                            s = DistributedSampler(range(n), num_replicas=replicas, rank=rank,
                                                   shuffle=shuffle, seed=seed, drop_last=drop_last)
                            s.set_epoch(epoch)
                            idx = list(s)
                            assert len(idx) == len(s)
                            entry = {"len": len(idx), "sha256": hashlib.sha256(
                                ",".join(map(str, idx)).encode()).hexdigest()}
                            if n <= 100:
                                entry["indices"] = idx
                            ranks.append(entry)
                        cases.append({"n": n, "replicas": replicas, "seed": seed, "epoch": epoch,
                                      "shuffle": shuffle, "drop_last": drop_last, "ranks": ranks})
print(json.dumps({"torch": torch.__version__, "cases": cases}))
