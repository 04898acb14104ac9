"""CPU tests for the kinds of faults that survived every test in issue 16's mutation run.

Each section names the fault it kills: the AI / minimum bytes of a quantized row taken from the
payload instead of the stored bytes; the cold protocol losing its L2 flush (or flushing after the
start event); the fp32 call-time TF32 guard switched off; the compare threshold moved from ``>``
to ``>=``; a worker timeout reported as a plain exit, or a non-zero exit with a rows file
accepted; the bitsandbytes shard rules (whole blocks per shard, same-as-slice) changed; the
``compile_s`` column reading a key no row carries. The expected values are worked out by hand in
the comments, not taken from the code under test.
"""

from __future__ import annotations

import json
import os
import time
import types

import pytest
import torch

from qbench import schemes
from qbench.scenario import from_dict
from tests.rows import make_row

# ---- quantized-row wiring: min_bytes and AI from the stored bytes --------------------------------


def test_int8_row_min_bytes_and_ai_from_stored_bytes(monkeypatch):
    """int8-weight-only at K = N = 256 on the CPU, by hand: payload 256 x 256 int8 = 65,536 B;
    metadata: a float32 scale and an int8 zero point per output row = 256 x (4 + 1) = 1,280 B;
    stored 66,816 B. M = 1, bf16 activations and output: min_bytes = 256 x 2 + 66,816 + 256 x 2 =
    67,840 B; FLOPs = 2 x 256 x 256 = 131,072; AI = 131,072 / 67,840 = 1.932075... FLOP/B (from
    the payload alone it would be 131,072 / 66,560 = 1.969...)."""
    import qbench.timing.cpu
    from qbench.measure import measure_scheme
    from qbench.timing.stats import summarize

    monkeypatch.setattr(qbench.timing.cpu, "time_cpu", lambda fn, settings: summarize([1.0]))  # the bytes are the point
    sc = from_dict({"name": "wiring", "m": [1, 4], "layer": {"in_features": 256, "out_features": 256},
                    "timing": {"warmup": 1, "min_reps": 3, "max_reps": 3, "budget_s": 0.05, "methods": ["cold"]},
                    "schemes": ["int8-weight-only"]}, "wiring.toml")
    rows = {r["m"]: r for r in measure_scheme(sc, 0, torch.device("cpu"))}
    r1 = rows[1]
    assert r1["status"] == "ok", r1["reason"]
    assert (r1["payload_bytes"], r1["metadata_bytes"], r1["bias_bytes"], r1["stored_bytes"]) == (65536, 1280, 0, 66816)
    assert r1["bits_per_weight"] == 8 * 66816 / 65536 == 8.15625
    assert r1["flops"] == 131072 and r1["min_bytes"] == 67840
    assert r1["arithmetic_intensity"] == 131072 / 67840
    # M = 4: 4 x 256 x 2 + 66,816 + 4 x 256 x 2 = 70,912 B; FLOPs 524,288
    assert rows[4]["min_bytes"] == 70912 and rows[4]["arithmetic_intensity"] == 524288 / 70912


# ---- the cold protocol: one flush per sample, before the start event ---------------------------


class _Log(list):
    def fn(self, name):
        return lambda *a, **k: self.append(name)


class _Event:
    def __init__(self, log, name, ms):
        self.log, self.name, self.ms = log, name, ms

    def record(self):
        self.log.append(f"{self.name}.record")

    def synchronize(self):
        self.log.append(f"{self.name}.sync")

    def elapsed_time(self, end):
        return self.ms


@pytest.fixture
def fake_cuda(monkeypatch):
    """qbench.timing.cold on fake CUDA (and the event sampling it shares, qbench.timing._cuda): a log
    of every flush, event record, sleep, sync and call."""
    from qbench.timing import _cuda, cold

    log = _Log()
    monkeypatch.setattr(cold, "require_cuda", lambda what: None)
    fake_torch = types.SimpleNamespace(cuda=types.SimpleNamespace(
        synchronize=log.fn("sync"), _sleep=lambda cycles: log.append(f"sleep {cycles}")))
    for module in (cold, _cuda):
        monkeypatch.setattr(module, "event_pairs",
                            lambda n: [(_Event(log, "start", 0.0125), _Event(log, "end", None)) for _ in range(n)])
        monkeypatch.setattr(module, "torch", fake_torch)
    flusher = types.SimpleNamespace(flush=log.fn("flush"))
    return cold, log, flusher


def _samples(log: list, first: str) -> list[list[str]]:
    """The log cut into one list per sample, each starting at ``first`` (warm-up dropped)."""
    out: list[list[str]] = []
    for item in log:
        if item == first or (first == "sleep" and item.startswith("sleep ")):
            out.append([])
        if out:
            out[-1].append(item)
    return out


def test_cold_busy_sleep_path(fake_cuda, monkeypatch):
    from qbench.timing.settings import TimingSettings

    cold, log, flusher = fake_cuda
    # busy period 2 x 40 + 20 = 100 µs at 0.0005 µs per cycle: 200,000 cycles
    monkeypatch.setattr(cold, "enqueue_us", lambda fn, f: 40.0)
    monkeypatch.setattr(cold, "sleep_us_per_cycle", lambda: 0.0005)
    settings = TimingSettings(warmup=2, min_reps=6, max_reps=6, budget_s=10.0)
    stats = cold.time_cold(log.fn("fn"), settings, flusher)
    assert stats.n == 6 and stats.median == 12.5  # 0.0125 ms per pair
    warm = log[:log.index("sync")]
    assert warm == ["flush", "fn", "flush", "fn"]  # each warm-up call after its own flush
    samples = _samples(log, "sleep")
    assert len(samples) == 6
    for s in samples[:-1]:
        assert s == ["sleep 200000", "flush", "start.record", "fn", "end.record"]
    assert samples[-1] == ["sleep 200000", "flush", "start.record", "fn", "end.record", "sync"]


def test_cold_host_sync_path(fake_cuda):
    from qbench.timing.settings import TimingSettings

    cold, log, flusher = fake_cuda
    settings = TimingSettings(warmup=1, min_reps=5, max_reps=5, budget_s=10.0)
    stats = cold.time_cold(log.fn("fn"), settings, flusher, host_sync=True)
    assert stats.n == 5 and stats.median == 12.5
    assert not any(item.startswith("sleep") for item in log)  # no busy period before a host-syncing call
    samples = _samples(log[log.index("sync") + 1:], "flush")
    assert len(samples) == 5
    for s in samples:  # flush, GPU idle, then the timed call
        assert s == ["flush", "sync", "start.record", "fn", "end.record", "end.sync"]


def test_enqueue_us_and_sleep_calibration_protocol(fake_cuda):
    cold, log, flusher = fake_cuda
    assert cold.enqueue_us(log.fn("fn"), flusher, trials=3) >= 0.0
    assert log == ["sync", "flush", "start.record", "fn", "end.record"] * 3 + ["sync"]
    # sleep_us_per_cycle: the smallest of the trials, ms -> µs per cycle
    times = iter([3.0, 1.0, 2.0])
    cold.event_pairs = lambda n: [(types.SimpleNamespace(record=lambda: None, elapsed_time=lambda end: next(times)),
                                   types.SimpleNamespace(record=lambda: None, synchronize=lambda: None))]
    assert cold.sleep_us_per_cycle(cycles=1000, trials=3) == 1.0  # 1 ms / 1000 cycles


def test_syncs_host_reads_the_sync_debug_mode(monkeypatch):
    from qbench.timing import _cuda as cold  # the host-sync probe every method's needs share

    modes = []
    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(
        get_sync_debug_mode=lambda: 0, synchronize=lambda: None, set_sync_debug_mode=modes.append))
    monkeypatch.setattr(cold, "torch", fake)

    def syncing():
        raise RuntimeError("called a synchronizing CUDA operation")

    assert cold.syncs_host(syncing) is True and modes == ["error", 0]
    assert cold.syncs_host(lambda: None) is False
    with pytest.raises(RuntimeError, match="other"):
        cold.syncs_host(lambda: (_ for _ in ()).throw(RuntimeError("other")))


# ---- the TF32 guard at call time (CUDA branch, exercised on the CPU) -----------------------------


class _CudaInput:
    is_cuda = True


@pytest.mark.parametrize("name, expect", [("fp32", "ieee"), ("tf32", "tf32")])
def test_fp32_tf32_guard_checks_cuda_precision_at_call_time(name, expect, monkeypatch):
    from qbench.schemes import precision
    from qbench.schemes import float_schemes

    scheme = schemes.get(name)
    flags = (torch.backends.cuda.matmul, torch.backends.cudnn.conv, torch.backends.mkldnn.matmul)
    saved = [f.fp32_precision for f in flags]  # the build sets them process-wide
    try:
        module = scheme.build(torch.randn(4, 8), None, scheme.options_model())
    finally:
        for f, value in zip(flags, saved):
            f.fp32_precision = value
    assert module.expect == expect
    monkeypatch.setattr(float_schemes, "F", types.SimpleNamespace(linear=lambda x, w, b: "ran"))
    other = "tf32" if expect == "ieee" else "ieee"
    monkeypatch.setattr(precision, "cuda_matmul_fp32_precision", lambda: other)
    with pytest.raises(RuntimeError, match=f"FP32 matmul precision is '{other}' at call time, this layer needs '{expect}'"):
        module(_CudaInput())
    monkeypatch.setattr(precision, "cuda_matmul_fp32_precision", lambda: expect)
    assert module(_CudaInput()) == "ran"
    # the CPU branch is not consulted for a CUDA input
    monkeypatch.setattr(precision, "cpu_matmul_fp32_precision", lambda: "bf16")
    assert module(_CudaInput()) == "ran"


# ---- compare: the regression threshold is strict (B time > threshold x A time) --------------------


def _doc(median, spread=0.01):
    return {"rows": [make_row(scheme="bf16", m=1, k=8, n=8, status="ok", error={"rel_fro": 0.01},
                              latency_us={"stream": {"median": median, "p10": median * (1 - spread),
                                                     "p90": median * (1 + spread), "n": 20}})]}


@pytest.mark.parametrize("b_median, regression", [(1.05, False), (1.0500001, True), (2.0, True), (1.04, False)])
def test_compare_threshold_is_strict(b_median, regression):
    from qbench.readers.compare import compare_docs

    (rec,) = compare_docs(_doc(1.0), _doc(b_median), "stream", threshold=1.05)
    assert rec["verdict"] == "slower"  # [0.99, 1.01] against [1.0296, ...]: no overlap
    assert rec["speedup"] == 1.0 / b_median
    assert rec["regression"] is regression


def test_compare_cli_exit_status_at_the_threshold(tmp_path, capsys):
    from qbench.readers import compare
    from qbench.results import read_results, write_results
    from tests.conftest import run_subcommand

    base = read_results(__import__("pathlib").Path(__file__).parent / "fixtures" / "cuda_stream.json").to_json()

    def write(name, factor):
        doc = json.loads(json.dumps(base))
        for row in doc["rows"]:
            s = (row["latency_us"] or {}).get("stream")
            if s:
                for key in ("median", "p10", "p90", "mean"):
                    s[key] = s[key] * factor
        write_results(tmp_path / name, doc, force=True)
        return str(tmp_path / name)

    a, b = write("a.json", 1.0), write("b.json", 2.0)
    assert run_subcommand(compare, "compare", a, b, "--threshold", "2.0") == 0  # B = 2.0 x A is not > 2.0 x A
    assert run_subcommand(compare, "compare", a, b, "--threshold", "1.99") == 1
    assert "REGRESSION" in capsys.readouterr().out


# ---- runner: how a worker ended decides its rows --------------------------------------------------


class _Proc:
    """A worker as the runner sees it. ``pid`` is this test's own (alive in ``/proc``: the runner's
    check of a worker whose exit the forkserver has not reported finds it running); a kill is
    reported as SIGKILL's exit at the next join, as the forkserver reports it."""

    def __init__(self, exitcode, alive=False):
        self.exitcode, self.alive, self.killed, self.joins = exitcode, alive, False, []
        self.pid = os.getpid()
        # the runner waits on the sentinel and the pipe (multiprocessing.connection.wait): a readable
        # fd (a pipe whose write end is closed) lets it go on at once, to join and read is_alive
        self.sentinel, w = os.pipe()
        os.close(w)

    def join(self, timeout=None):
        self.joins.append(timeout)
        if self.alive and not self.killed and timeout:
            time.sleep(timeout)  # a live worker's join waits its timeout out
        if self.killed:
            self.alive = False
            if self.exitcode is None:
                self.exitcode = -9

    def is_alive(self):
        return self.alive

    def kill(self):
        self.killed = True


class _Go:
    """The runner's end of the go/done pipe of a worker that never says "done"."""

    def __init__(self):
        self.sent, self.closed = [], False
        self.r, self._w = os.pipe()

    def fileno(self):
        return self.r

    def send_bytes(self, b):
        self.sent.append(b)

    def close(self):
        self.closed = True


def _workers(tmp_path, timeout=7.5):
    from qbench import runner

    sc = from_dict({"name": "w", "m": [1, 2], "layer": {"in_features": 64, "out_features": 64},
                    "timing": {"scheme_timeout_s": timeout}, "schemes": ["bf16"]}, "w.toml")
    return runner._Workers(sc, torch.device("cpu"), None, str(tmp_path), prestart=False)


def _ended(tmp_path, proc, rows=None, log="starting\nlast words\n\n"):
    workers = _workers(tmp_path)
    rows_path, log_path = tmp_path / "rows.json", tmp_path / "worker.log"
    if rows is not None:
        rows_path.write_text(json.dumps(rows))
    log_path.write_text(log)
    go = _Go()
    workers.started[0] = (proc, go, str(rows_path), str(log_path))
    out = workers.rows(0)
    assert go.sent == [b"go"] and go.closed
    return out


def test_worker_exit_0_with_rows_file_gives_its_rows(tmp_path):
    proc = _Proc(0)
    assert _ended(tmp_path, proc, rows=[{"scheme": "bf16", "m": 1, "status": "ok"}]) == [
        {"scheme": "bf16", "m": 1, "status": "ok"}]
    # the exit was reported at the first wait (every wait is a slice of at most 0.5 s)
    assert proc.joins == [0.5] and not proc.killed


def test_worker_timeout_is_a_timeout_not_an_exit(tmp_path):
    proc = _Proc(None, alive=True)
    rows = _ended(tmp_path, proc, rows=[{"scheme": "bf16", "m": 1, "status": "ok"}])
    # waited in slices of at most 0.5 s until the 7.5 s timeout, killed, then its exit reported at once
    assert proc.killed and all(t <= 0.5 for t in proc.joins) and sum(proc.joins[:-1]) == pytest.approx(7.5, abs=0.6)
    assert [r["m"] for r in rows] == [1, 2] and {r["status"] for r in rows} == {"failed"}
    assert [(r["scheme"], r["base_scheme"], r["device"], r["k"], r["n"]) for r in rows] == [
        ("bf16", "bf16", "cpu", 64, 64)] * 2  # the failed rows keep the scheme's identity
    assert rows[0]["reason"] == "worker timed out after 7.5 s; last output: last words"


@pytest.mark.parametrize("code, what", [(3, "worker exited with status 3"), (-9, "worker killed by SIGKILL"),
                                        (-11, "worker killed by SIGSEGV"), (-200, "worker killed by signal 200")])
def test_worker_nonzero_exit_with_a_rows_file_is_a_failure(tmp_path, code, what):
    rows = _ended(tmp_path, _Proc(code), rows=[{"scheme": "bf16", "m": 1, "status": "ok"}])
    assert {r["status"] for r in rows} == {"failed"} and len(rows) == 2
    assert rows[0]["reason"] == f"{what}; last output: last words"


def test_worker_exit_0_without_rows_file_and_empty_log(tmp_path):
    rows = _ended(tmp_path, _Proc(0), rows=None, log="\n  \n")
    assert rows[0]["reason"] == "worker exited with status 0" and rows[0]["status"] == "failed"


def test_a_scheme_without_a_cpu_kernel_is_skipped_without_a_worker(tmp_path, monkeypatch):
    from qbench import runner

    sc = from_dict({"name": "w", "m": [1, 4], "layer": {"in_features": 64, "out_features": 64},
                    "schemes": ["tf32"]}, "w.toml")
    workers = runner._Workers(sc, torch.device("cpu"), None, str(tmp_path), prestart=False)
    monkeypatch.setattr(workers, "_start", lambda index: pytest.fail("a worker was started"))
    rows = workers.rows(0)
    assert [(r["scheme"], r["m"], r["device"], r["status"]) for r in rows] == [
        ("tf32", 1, "cpu", "skipped"), ("tf32", 4, "cpu", "skipped")]
    assert rows[0]["reason"] == rows[1]["reason"] == "tf32 has no CPU kernel: needs CUDA"  # results/cpu/decode.json


def test_prestart_starts_the_next_worker_after_go(tmp_path, monkeypatch):
    """With prestart, rows(i) gives worker i its go and then starts worker i + 1 (none after the last)."""
    from qbench import runner

    sc = from_dict({"name": "w", "m": [1], "layer": {"in_features": 64, "out_features": 64},
                    "schemes": ["bf16", "fp16", "fp32"]}, "w.toml")
    workers = runner._Workers(sc, torch.device("cpu"), None, str(tmp_path), prestart=True)
    started, gos = [], {}

    def fake_start(index):
        started.append(index)
        rows_path = tmp_path / f"rows{index}.json"
        rows_path.write_text(json.dumps([{"scheme": sc.schemes[index].label, "m": 1, "status": "ok"}]))
        gos[index] = _Go()
        return _Proc(0), gos[index], str(rows_path), str(tmp_path / "none.log")

    monkeypatch.setattr(workers, "_start", fake_start)
    assert workers.rows(0)[0]["scheme"] == "bf16"
    assert started == [0, 1] and list(workers.started) == [1] and gos[0].sent == [b"go"] and gos[1].sent == []
    assert workers.rows(1)[0]["scheme"] == "fp16" and started == [0, 1, 2] and list(workers.started) == [2]
    assert workers.rows(2)[0]["scheme"] == "fp32" and started == [0, 1, 2] and workers.started == {}


def test_death_reason_log_tail(tmp_path):
    from qbench import runner

    log = tmp_path / "w.log"
    log.write_text("".join(f"line {i}\n" for i in range(300)) + "x" * 500 + "\n\n")
    # the last 3 NON-BLANK lines (the two trailing blank lines do not count against the 3)
    assert runner.log_tail(str(log), 3) == ["line 298", "line 299", "x" * 500]
    assert len(runner.log_tail(str(log))) == 200 and runner.log_tail(str(log))[0] == "line 101"
    assert runner.log_tail(str(tmp_path / "missing.log")) == []
    torn = tmp_path / "torn.log"  # a worker killed mid-write leaves bytes that are not UTF-8
    torn.write_bytes(b"ok\n\xff\xfe half a character\n")
    assert runner.log_tail(str(torn)) == ["ok", "\ufffd\ufffd half a character"]
    assert runner._death_reason(1, str(log), 1.0) == "worker exited with status 1; last output: " + "x" * 240
    # a model-step worker's last phase line, then a library's warnings: the reason names both
    hung = tmp_path / "hung.log"
    hung.write_text("09:07:31 [qbench] int8+compiled M=16 context=128: first call of the default compiled step "
                    "(compiling)\nW1206 09:13:45.98 torch/_inductor: a warning\n")
    assert runner._death_reason(None, str(hung), 400.0) == (
        "worker timed out after 400 s; in phase: 09:07:31 [qbench] int8+compiled M=16 context=128: first call of the "
        "default compiled step (compiling); last output: W1206 09:13:45.98 torch/_inductor: a warning")
    # the one reading of a dead worker's log, which the forkserver-gone reason uses too
    assert runner._death_reason(None, str(hung), 400.0).endswith("; " + runner.log_said(str(hung)))
    assert runner.log_said(str(tmp_path / "missing.log")) == ""


# ---- bitsandbytes shard rules against real shards -------------------------------------------------


def _bnb_dequantized(module) -> torch.Tensor:
    import bitsandbytes.functional as bnbf

    w = module.weight
    if getattr(w, "quant_state", None) is not None:
        return bnbf.dequantize_4bit(w.data, w.quant_state).float()
    return w.CB.float() * w.SCB.float()[:, None] / 127  # int8-bnb: row-wise absmax (SCB)


def _shard_vs_slice(name, options, split, k, n=16, p=2, rank=1):
    from qbench.tp import shard

    scheme = schemes.get(name)
    gen = torch.Generator().manual_seed(7)
    w = torch.randn(n, k, generator=gen) / 8
    w[:, k // 3] *= 30  # a large input feature: an absmax over K changes when it leaves a shard
    whole = _bnb_dequantized(scheme.build(w, None, options))
    part = _bnb_dequantized(scheme.build(shard.shard_weight(w, None, split, p, rank)[0], None, options))
    lo, hi = shard.shard_range(n if split == "column" else k, p, rank)
    sliced = whole[lo:hi] if split == "column" else whole[:, lo:hi]
    return shard.plan(schemes.get(name), options, split, p, k, n), torch.equal(part, sliced)


@pytest.mark.parametrize("name", ["nf4-bnb", "fp4-bnb"])
@pytest.mark.parametrize("split", ["column", "row"])
@pytest.mark.parametrize("double_quant", [False, True])
def test_bnb_4bit_same_as_slice_matches_real_shards(name, split, double_quant):
    """Blocks of 64 along each row: with K/p = 128 a shard holds whole blocks, so without double
    quantization its absmax are the slice's; double quantization recomputes the nested statistics
    (their offset is the mean absmax) per shard."""
    options = schemes.get(name).options_model(double_quant=double_quant)
    verdict, equal = _shard_vs_slice(name, options, split, k=256)
    assert verdict.reason is None
    assert verdict.same_as_slice is (not double_quant)
    assert equal is (not double_quant)


@pytest.mark.parametrize("name", ["nf4-bnb", "fp4-bnb"])
def test_bnb_4bit_row_shard_needs_whole_blocks(name):
    """K = 64, p = 2: a 32-wide row shard would put each 64-element block across two rows."""
    from qbench.tp import shard

    options = schemes.get(name).options_model(double_quant=False)
    plan = shard.plan(schemes.get(name), options, "row", 2, 64, 16)
    assert plan.reason == f"row shard K = 32 is not a multiple of 64 (blocksize) for {name}"
    assert shard.plan(schemes.get(name), schemes.get(name).options_model(blocksize=128), "row", 2, 256, 16).reason is None
    assert "not a multiple of 128" in shard.plan(schemes.get(name), schemes.get(name).options_model(blocksize=128), "row", 4,
                                                 256, 16).reason
    _, equal = _shard_vs_slice(name, options, "row", k=64)
    assert not equal  # what the rule prevents: the blocks of a 32-wide shard are not the slice's


@pytest.mark.parametrize("split, same", [("column", True), ("row", False)])
def test_int8_bnb_same_as_slice_matches_real_shards(split, same):
    options = schemes.get("int8-bnb").options_model()
    verdict, equal = _shard_vs_slice("int8-bnb", options, split, k=256)
    assert verdict.reason is None and verdict.same_as_slice is same and equal is same


# ---- the compile_s column reads compile.first_call_s ---------------------------------------------


def test_compile_s_column_reads_first_call_s():
    from qbench.render.columns import COLUMNS, DASH

    from qbench.row import RowError
    from tests.rows import typed_row

    col = COLUMNS["compile_s"]
    ident = {"scheme": "x", "m": 1, "k": 8, "n": 8, "status": "ok"}
    row = typed_row(**ident, compile={"first_call_s": 14.25, "graphs_compiled": 1, "recompilations_during_timing": 0})
    assert col.value(row) == 14.25 and col.cell(row) == "14.2"  # .1f, round half to even
    eager = typed_row(**ident, compile=None)
    assert col.value(eager) is None and col.cell(eager) == DASH
    with pytest.raises(RowError, match="compile.compile_s"):  # the key the column once read: no row has it
        typed_row(**ident, compile={"compile_s": 3.0})


def test_compile_s_column_on_a_real_compiled_row():
    from qbench.render.columns import COLUMNS
    from qbench.results import read_results

    doc = read_results("results/h200/decode.json")
    row = next(r for r in doc.rows if r.scheme == "int8-weight-only+compiled")
    first = row.compile.first_call_s
    assert first > 0 and COLUMNS["compile_s"].value(row) == first
    assert COLUMNS["compile_s"].cell(row) == f"{first:.1f}"
