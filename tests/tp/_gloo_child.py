"""Child of tests/tp/test_gloo.py: one gloo rank that shards every case and gathers its output."""

from __future__ import annotations

import torch
import torch.distributed as dist

from qbench import schemes
from qbench.tp import collectives, shard


def rank_main(rank: int, world: int, store: str, cases: list, weight, bias, x, out_path: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    outputs = {}
    with torch.inference_mode():
        for key, name, split, reduce_dtype in cases:
            scheme = schemes.get(name)
            w, b = shard.shard_weight(weight, bias, split, world, rank)
            module = scheme.build(w, b, scheme.options_model())
            y_local = module(shard.shard_activations(x.to(scheme.activation_dtype), split, world, rank))
            if split == "column":
                y = collectives.all_gather_columns(y_local, world)
            else:
                y = collectives.all_reduce_rows(y_local, reduce_dtype or y_local.dtype, bias)
            outputs[key] = y.clone()
    if rank == 0:
        torch.save(outputs, out_path)
    dist.destroy_process_group()
