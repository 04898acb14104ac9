"""ledger: bytes counted from the real tensors, checked against hand-computed values."""

import pytest
import torch

from qbench import schemes

from qbench.schemes import ledger
from qbench.schemes.base import TensorPart
from tests.conftest import needs_cuda

K = N = 4096


@pytest.fixture(scope="module")
def weight():
    return torch.randn(N, K, generator=torch.Generator().manual_seed(0)) / 64


def _ledger(name, weight, device="cpu", **options):
    scheme = schemes.get(name)
    module = scheme.build(weight.to(device), None, scheme.options_model(**options))
    return ledger.count(scheme.parts(module))


def test_fp16_ledger(weight):
    book = _ledger("fp16", weight)
    assert book.payload_bytes == 33_554_432 and book.metadata_bytes == 0
    assert book.fields(K, N)["bits_per_weight"] == 16.0


@pytest.mark.slow
def test_nf4_double_quant_ledger(weight):
    """nf4, block 64, double quantization: 8,388,608 B of packed codes; metadata = 262,144 uint8
    absmax codes + 16 float32 code values + one float32 offset + 1,024 float32 second-level absmax
    (blocks of 256) + 256 float32 second-level code values = 267,332 B: 4.1275 bits/weight."""
    book = _ledger("nf4-bnb", weight)
    assert book.payload_bytes == 8_388_608
    assert book.metadata_bytes == 262_144 + 64 + 4 + 4_096 + 1_024
    assert book.fields(K, N)["bits_per_weight"] == pytest.approx(4.1275, abs=1e-4)


@pytest.mark.slow
def test_nf4_without_double_quant(weight):
    """Without double quantization the absmax stays float32: 262,144 x 4 B + the 16-entry code."""
    book = _ledger("nf4-bnb", weight, double_quant=False)
    assert book.metadata_bytes == 262_144 * 4 + 64


@pytest.mark.slow
def test_int4_intx_stores_one_value_per_int8(weight):
    """int4-intx keeps each 4-bit value in an int8: payload = K*N bytes (not K*N/2); per-group 128
    scales (bf16) and zero points (int8): 4096 x 32 x (2 + 1) B."""
    book = _ledger("int4-intx", weight)
    assert book.payload_bytes == K * N
    assert book.metadata_bytes == 4096 * 32 * 3
    dtypes = {p["name"]: p["dtype"] for p in book.parts}
    assert dtypes["weight.qdata"] == "int8"


@pytest.mark.slow
def test_int8_bnb_ledger(weight):
    book = _ledger("int8-bnb", weight)
    assert book.payload_bytes == K * N and book.metadata_bytes == N * 4  # float32 SCB per row


@pytest.mark.cuda
@needs_cuda
def test_int4_tinygemm_ledger_cuda(weight):
    """tinygemm int4, group 128: 8,388,608 B packed payload + 524,288 B of bf16 scale-and-zero
    ([K/128, N, 2] x 2 B)."""
    book = _ledger("int4-weight-only", weight, device="cuda")
    assert book.payload_bytes == 8_388_608
    assert book.metadata_bytes == 524_288


def test_same_storage_counted_once():
    t = torch.zeros(10, dtype=torch.float32)
    book = ledger.count([TensorPart("a", "payload", t), TensorPart("a-again", "payload", t)])
    assert book.payload_bytes == 40


def test_roles_and_bias():
    book = ledger.count([TensorPart("w", "payload", torch.zeros(4, 4, dtype=torch.int8)),
                         TensorPart("s", "metadata", torch.zeros(4, dtype=torch.float32)),
                         TensorPart("b", "bias", torch.zeros(4, dtype=torch.bfloat16))])
    assert (book.payload_bytes, book.metadata_bytes, book.bias_bytes, book.stored_bytes) == (16, 16, 8, 40)
    with pytest.raises(ValueError):
        ledger.count([TensorPart("x", "weird", torch.zeros(1))])


# ---- count() and fields() on hand-made parts (fast; mutation testing, docs/testing.md) ----------

def test_count_and_fields_by_hand():
    w = torch.zeros(4, 8, dtype=torch.int8)  # 32 B
    scale = torch.ones(4, 1, dtype=torch.float32)  # 16 B
    bias = torch.ones(4, dtype=torch.bfloat16)  # 8 B
    book = ledger.count([TensorPart("weight.qdata", "payload", w), TensorPart("weight.scale", "metadata", scale),
                         TensorPart("bias", "bias", bias)])
    assert (book.payload_bytes, book.metadata_bytes, book.bias_bytes, book.stored_bytes) == (32, 16, 8, 56)
    assert book.fields(8, 4) == {
        "payload_bytes": 32, "metadata_bytes": 16, "bias_bytes": 8, "stored_bytes": 56,
        "bits_per_weight": 8 * 56 / 32,
        "ledger": [{"name": "weight.qdata", "role": "payload", "dtype": "int8", "shape": [4, 8], "bytes": 32},
                   {"name": "weight.scale", "role": "metadata", "dtype": "float32", "shape": [4, 1], "bytes": 16},
                   {"name": "bias", "role": "bias", "dtype": "bfloat16", "shape": [4], "bytes": 8}]}


def test_count_dedupes_one_storage_under_two_names_and_goes_on():
    a = torch.ones(16, dtype=torch.float32)  # 64 B
    alias = a.detach()  # another tensor object over the same storage, offset and shape
    view = a[8:]  # the same storage at another offset: its own 32 B
    b = torch.ones(2, dtype=torch.float16)  # 4 B, after the duplicate
    book = ledger.count([TensorPart("a", "payload", a), TensorPart("a.alias", "payload", alias),
                         TensorPart("a.same", "payload", a), TensorPart("a.tail", "metadata", view),
                         TensorPart("b", "metadata", b)])
    assert [p["name"] for p in book.parts] == ["a", "a.tail", "b"]
    assert (book.payload_bytes, book.metadata_bytes) == (64, 36)


def test_count_lists_every_empty_part():
    """An empty tensor has no storage to share: every empty part is listed (0 bytes), never deduped."""
    e1, e2 = torch.empty(0), torch.empty(0, dtype=torch.int8)
    book = ledger.count([TensorPart("e1", "metadata", e1), TensorPart("e2", "metadata", e2),
                         TensorPart("e1.again", "metadata", e1)])
    assert [p["name"] for p in book.parts] == ["e1", "e2", "e1.again"] and book.stored_bytes == 0


def test_count_refuses_an_unknown_role():
    with pytest.raises(ValueError, match="^unknown ledger role 'scale' for weight.scale$"):
        ledger.count([TensorPart("weight.scale", "scale", torch.ones(1))])


def test_tensor_bytes_counts_a_views_own_elements():
    t = torch.ones(10, 10, dtype=torch.float64)
    assert ledger.tensor_bytes(t) == 800 and ledger.tensor_bytes(t[:2]) == 160
