"""Two gloo ranks on the CPU: the gathered (column) and all-reduced (row) outputs of a sharded
layer equal the unsharded layer's output within that scheme's own error.

One spawn of two processes runs every case (start-up dominates). For each scheme and split, with
``e_u`` = rel. Frobenius error of the unsharded output against the float64 reference, ``e_s`` the
sharded one's and ``d`` the sharded output against the unsharded output:

* column split, whose shards equal the slice of the unsharded quantized weight
  (the scheme's :attr:`~qbench.schemes.scheme.Scheme.shard` rule): the same products and sums, so ``d`` is (near) zero;
* row split: each rank rounds its partial sum to the output dtype and the all-reduce rounds the
  sum, ``p`` more roundings of unit roundoff ``u`` (2^-8 for bf16), and a per-row-scaled weight is
  quantized per shard; so ``e_s <= e_u + p u``, and ``d <= max(e_u, e_s)`` where the shard is the
  slice (not sharding and sharding differ by no more than the scheme's own error) or
  ``d <= 1.5 max(e_u, e_s)`` where each shard is quantized with its own per-row scales (two
  independent quantization errors of one size add in quadrature: sqrt(2) ~ 1.41).
"""

import torch
import torch.multiprocessing as mp

from qbench import inputs, metrics, schemes
from qbench.tp import shard
from tests.tp._gloo_child import rank_main

SCHEMES = ("bf16", "int8-weight-only", "int4-intx")
BF16_U = 2.0 ** -8


def test_two_gloo_ranks_match_unsharded(tmp_path):
    k = n = 256
    m, world = 4, 2
    gen = torch.Generator().manual_seed(11)
    weight = torch.randn(n, k, generator=gen) / k ** 0.5
    bias = torch.randn(n, generator=gen) * 0.1
    x = torch.randn(m, k, generator=gen)
    cases = [(f"{name}/{split}", name, split, None) for name in SCHEMES for split in ("column", "row")]
    cases.append(("bf16/row/float32", "bf16", "row", torch.float32))
    out_path = str(tmp_path / "out.pt")
    mp.start_processes(rank_main, args=(world, str(tmp_path / "store"), cases, weight, bias, x, out_path),
                       nprocs=world, join=True, start_method="spawn")
    outputs = torch.load(out_path)
    y_ref = inputs.reference(x, weight, bias)
    with torch.inference_mode():
        for key, name, split, _ in cases:
            scheme = schemes.get(name)
            y_whole = scheme.build(weight, bias, scheme.options_model())(x.to(scheme.activation_dtype))
            y = outputs[key]
            assert y.shape == (m, n) and y.dtype == y_whole.dtype, key
            e_u = metrics.error_metrics(y_whole, y_ref)["rel_fro"]
            e_s = metrics.error_metrics(y, y_ref)["rel_fro"]
            d = metrics.error_metrics(y, y_whole)["rel_fro"]
            if split == "column":
                assert d <= BF16_U / 2, (key, d)
            else:
                assert e_s <= e_u + world * BF16_U, (key, e_s, e_u)
                same = shard.plan(scheme, scheme.options_model(), split, world, k, n).same_as_slice
                assert d <= (1.0 if same else 1.5) * max(e_u, e_s), (key, d, e_u, e_s)
