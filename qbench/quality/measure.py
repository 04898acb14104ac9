"""Measure one scheme of a quality scenario in its worker: one :class:`~qbench.quality.row.QualityRow`.

In order:

1. **Skips**: a scheme with no kernel here and no emulation, a linear shape it cannot take, or a
   model that does not fit the free memory: a skipped row naming the reason. A scheme with no kernel
   here but an emulation (:attr:`qbench.schemes.base.Scheme.emulate`) runs emulated: its quantized
   weights dequantized into a float matmul, the row flagged ``emulated``.
2. **Reference**: the model with float linears in the reference dtype, run once per run over every
   chunk; the log-probabilities of the scored positions go to a file in the run's shared folder
   (``[chunks, scored, vocab]`` at ``quality.logprobs`` precision) that every later worker reads.
3. **Scheme**: the model with every linear of every block built by the scheme from the FP32
   weights (the LM head too with ``quality.lm_head``), run teacher-forced over the same chunks. An
   entry with a mixed recipe builds each linear with the recipe's scheme for its (block, role)
   (:class:`qbench.model.recipe.Plan`); each of those schemes runs its kernel or, without one here,
   emulated (the row is ``emulated`` when any part is).
   Each chunk's first token is the checkpoint's BOS when it has one (llama.cpp does the same); the
   logits of positions ``chunk/2 .. chunk-2`` are scored against the tokens that follow.
4. **Statistics** (:func:`qbench.quality.stats.summarize`), stored bytes (the ledger of every built
   linear, each counted by the scheme that built it), peak memory; with ``quality.sensitivity``, each role (or block) quantized alone inside
   the reference model, ranked by KL divergence.

Every scheme's worker sees the same tokens and the same reference, so rows of one run compare.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import time
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import torch
import torch.nn.functional as F

from qbench.model.checkpoint import TensorMap, of_model
from qbench.model.llama import FP8_KV, KVCache, Llama, Weights, build_model, float_builder, rms_norm
from qbench.quality import calibrate, stats as qstats
from qbench.quality.row import QualityRow
from qbench.quality.spec import read_tokens, resolve_path, scored_per_chunk, span, span_chunks, text_sha256, \
    tokenizer_file, weights_label
from qbench.hardware import free_bytes
from qbench.row import describe_exception, flag_record
from qbench import schemes
from qbench.schemes import ledger
from qbench.schemes.calibrated import NotPositiveDefinite
from qbench.model.config import BLOCK_LINEARS, PRESETS, StepModelConfig
from qbench.model.recipe import UNITS, plan_of

log = logging.getLogger("qbench.quality")

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
#: Device memory kept free beyond the estimate (bytes): allocator fragmentation, library workspaces,
#: the logits of one chunk. Project choice.
HEADROOM = 2 << 30


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _inputs(scenario: Any) -> tuple:
    """What a worker reads once: the checkpoint (or None; opened once per process), the model config
    (the checkpoint's, else the preset's: a quality scenario names one or the other) and the text's
    token ids."""
    ckpt = of_model(scenario.model, scenario.source)
    config = ckpt.config if ckpt is not None else PRESETS[scenario.model.name]
    return ckpt, config, read_tokens(scenario.model, scenario.quality, scenario.source)


def blank_rows(scenario: Any, entry, scheme, device) -> list[dict]:
    """The scheme's one row with its identity and nothing measured."""
    return [_blank(scenario, entry, scheme, device, *_inputs(scenario))]


def _blank(scenario: Any, entry, scheme, device, ckpt, config: StepModelConfig, ids: list[int]) -> dict:
    q = scenario.quality
    text = resolve_path(q.text, scenario.source)
    chunks = span_chunks(q, len(ids))
    params = sum(k * n for role, (k, n) in config.linear_shapes().items() if role != "lm_head") * config.blocks
    if q.lm_head:
        params += config.hidden * config.vocab
    row = QualityRow(scheme=entry.label, base_scheme=scheme.name, library=scheme.library, mode=entry.options.mode,
                     options=entry.options.model_dump(exclude={"label", "mode"}),
                     model=scenario.model.checkpoint or scenario.model.name, title=config.title,
                     weights=weights_label(scenario, ckpt), checkpoint_id=None if ckpt is None else ckpt.identity,
                     device=str(device), weight_dtype=scheme.weight_dtype,
                     activation_dtype=_dtype_name(scheme.activation_dtype), text=str(text),
                     text_sha256=text_sha256(text),
                     tokenizer_sha256=text_sha256(tokenizer_file(scenario.model, q, scenario.source)),
                     chunk=q.chunk, chunks=chunks, span=span(q, len(ids)),
                     scored_per_chunk=scored_per_chunk(q.chunk), lm_head="scheme" if q.lm_head else "float",
                     linear_params=params, recipe=plan_of(entry, config.blocks).record(q.lm_head))
    return row.model_dump(mode="json", exclude_none=True)


def _skip(rows: list[dict], status: str, reason: str) -> list[dict]:
    for row in rows:
        row["status"], row["reason"] = status, (reason.strip().splitlines() or [status])[0][:400]
    return [QualityRow.model_validate(r).model_dump(mode="json", exclude_none=True) for r in rows]


def few_calibration_tokens(calibrated: list[tuple[int, int]]) -> Optional[str]:
    """The ``few-calibration-tokens`` flag's text when some linear built from calibration statistics
    (``(tokens, K)`` each) saw fewer tokens than its K inputs, else None: its XᵀX is rank-deficient,
    so GPTQ and AWQ chose its values on the directions the calibration tokens span."""
    few = [(t, k) for t, k in calibrated if t < k]
    if not few:
        return None
    tokens, kmax = min(t for t, _ in few), max(k for _, k in few)
    return (f"{tokens} calibration tokens, fewer than the inputs of {len(few)} of {len(calibrated)} calibrated "
            f"linears (K up to {kmax}): their XᵀX has rank ≤ {tokens}, so the values were chosen on the directions "
            f"those tokens span; quality.calibration chunks × chunk ≥ {kmax} gives full rank")


def reference_dtype(scenario: Any, ckpt, device: torch.device) -> torch.dtype:
    """The reference's dtype: ``quality.reference``, or the checkpoint's own dtype; for seeded weights
    float32 on a CPU and bfloat16 on CUDA (the dtype such a model would ship in)."""
    ref = scenario.quality.reference
    if ref != "checkpoint":
        return _DTYPES[ref]
    if ckpt is not None:
        return _DTYPES[ckpt.dtype] if ckpt.dtype in _DTYPES else torch.float32
    return torch.bfloat16 if device.type == "cuda" else torch.float32


def chunk_tokens(scenario: Any, ids: list[int], device: torch.device, ckpt=None) -> torch.Tensor:
    """``[chunks, chunk]`` int64 token ids from the text's ``ids``, chunks ``first_chunk ..
    first_chunk + chunks - 1`` of the text (:func:`qbench.quality.spec.span`); each chunk's first
    token the BOS when the checkpoint ``ckpt`` has one."""
    q = scenario.quality
    n, start = span_chunks(q, len(ids)), q.first_chunk * q.chunk
    out = torch.tensor(ids[start: start + n * q.chunk], dtype=torch.int64).view(n, q.chunk)
    if ckpt is not None and ckpt.bos is not None:
        out[:, 0] = ckpt.bos
    return out.to(device)


def estimate_bytes(config: StepModelConfig, scheme, ref_dtype: torch.dtype, with_reference: bool,
                   sensitivity: bool, chunk: int, emulated: bool = False) -> int:
    """Peak bytes of one quality worker (an upper estimate): the scheme's model (its linears at
    ``max(nominal bits, 8)`` plus 10 % of metadata; 32 bits when ``emulated``: the dequantized FP32
    weight), the reference model when this worker computes it or runs sensitivity, one block's FP32
    weights while building, the FP32 embedding and head, and one chunk's logits with their
    log-softmax (4 × chunk × vocab × 4 bytes)."""
    params = config.block_linear_params() * config.blocks
    bits = 32 if emulated else max(float(scheme.nominal_bits), 8.0)
    model = int(params * bits / 8 * 1.1)
    ref = params * torch.empty((), dtype=ref_dtype).element_size()
    peak = max(model, ref if with_reference else 0) + (ref if sensitivity else 0)
    return (peak + config.block_linear_params() * 4 + 2 * config.vocab * config.hidden * 4
            + 4 * chunk * config.vocab * 4)


class _Reference:
    """The run's shared reference log-probabilities: computed by the first worker, read by the rest."""

    def __init__(self, scenario: Any, config: StepModelConfig, ckpt, device: torch.device, shared_dir: str,
                 tokens: torch.Tensor):
        q = scenario.quality
        self.dtype = reference_dtype(scenario, ckpt, device)
        self.store = _DTYPES[q.logprobs]
        self.first, self.scored = q.chunk // 2, scored_per_chunk(q.chunk)
        self.shape = (tokens.shape[0], self.scored, config.vocab)
        key = json.dumps({"model": scenario.model.to_dict(), "quality": q.to_dict(), "seed": scenario.seed,
                          "span": [q.first_chunk, tokens.shape[0], q.chunk],
                          "source": scenario.source, "device": device.type, "dtype": str(self.dtype),
                          "tokens": hashlib.sha256(tokens.cpu().numpy().tobytes()).hexdigest()}, sort_keys=True)
        digest = hashlib.sha256(key.encode()).hexdigest()[:16]
        self.path = Path(shared_dir) / f"quality-reference-{digest}.bin"
        self.computed_s: Optional[float] = None
        self.held: Optional[torch.Tensor] = None  # every chunk on the device while held (:meth:`hold`)

    def ensure(self, weights: Weights, tokens: torch.Tensor) -> None:
        if self.path.exists():
            return
        t0 = time.perf_counter()
        log.info("reference: building the %s model and running %d chunks", _dtype_name(self.dtype), tokens.shape[0])
        model = build_model(weights, float_builder(self.dtype), self.dtype)
        np_dtype = np.float32 if self.store == torch.float32 else np.float16
        tmp = self.path.with_suffix(".tmp")
        out = np.lib.format.open_memmap(tmp, mode="w+", dtype=np_dtype, shape=self.shape)
        with torch.inference_mode():
            for c in range(tokens.shape[0]):
                logits = model(tokens[c][None])[0, self.first: self.first + self.scored]
                out[c] = F.log_softmax(logits, dim=-1).to(self.store).cpu().numpy()
        out.flush()
        del out, model
        os.replace(tmp, self.path)
        if weights.device.type == "cuda":
            torch.cuda.empty_cache()
        self.computed_s = time.perf_counter() - t0

    def chunk(self, c: int, device: torch.device) -> torch.Tensor:
        if self.held is not None:
            return self.held[c]
        data = np.load(self.path, mmap_mode="r")
        return torch.from_numpy(np.ascontiguousarray(data[c])).to(device).float()

    def hold(self, device: torch.device) -> bool:
        """Keep every chunk's log-probabilities on ``device`` (float32) while many passes read them
        (unit sensitivity: one pass per unit), when they take at most a quarter of its free memory;
        :meth:`release` drops them. Returns whether they are held."""
        need = int(np.prod(self.shape)) * 4
        free = free_bytes(device)
        if free is None or need > free // 4:
            return False
        data = np.load(self.path, mmap_mode="r")
        self.held = torch.from_numpy(np.ascontiguousarray(data)).to(device).float()
        return True

    def release(self) -> None:
        self.held = None


#: The fp8 KV cache of the quality job, as its rows state it.
KV_FP8_RECORD = {"dtype": "float8_e4m3fn",
                 "scale": "static per (block, KV head) = absmax / 448 of the chunk's K (and V) of that head, set when "
                          "the chunk is written into the empty cache",
                 "read": "each chunk is written into the fp8 cache and attends over its values dequantized to the "
                         "activation dtype before SDPA (the decode step's split-KV kernel reads the same stored "
                         "values and scales)"}


def _forward_chunk(model: Llama, chunk: torch.Tensor, kv_dtype: Optional[torch.dtype]) -> torch.Tensor:
    """The logits ``[1, T, vocab]`` of one teacher-forced chunk ``[1, T]``: without a cache
    (``kv_dtype`` None), or through an empty KV cache of ``kv_dtype`` (its attention reads what the
    cache holds, :meth:`qbench.model.llama.Block._attend_chunk`)."""
    if kv_dtype is None:
        return model(chunk)
    cache = KVCache.empty(model.config, 1, chunk.shape[1], kv_dtype, chunk.device, len(model.blocks))
    return model(chunk, 0, cache)


def _per_token(model: Llama, tokens: torch.Tensor, ref: _Reference, device: torch.device,
               kv_dtype: Optional[torch.dtype] = None,
               logits_of: Optional[Callable[[int], torch.Tensor]] = None) -> dict[str, np.ndarray]:
    """Per scored token over every chunk (each teacher-forced through the model's one forward, no
    cache, or through a ``kv_dtype`` cache): NLL under the scheme and the reference, KL divergence,
    same top, the probability of the token that follows under each, and the spread (max - min) of
    the reference's log-probs. ``logits_of(c)``: chunk ``c``'s logits of the scored positions
    ``[scored, vocab]`` some other way (:func:`_unit_sensitivity`: from a block's stored input on)."""
    parts: dict[str, list] = {k: [] for k in ("nll", "nll_ref", "kld", "same_top", "p", "p_ref", "spread")}
    with torch.inference_mode():
        for c in range(tokens.shape[0]):
            logits = logits_of(c) if logits_of is not None else \
                _forward_chunk(model, tokens[c][None], kv_dtype)[0, ref.first: ref.first + ref.scored]
            lp = F.log_softmax(logits, dim=-1).to(ref.store).float()  # at the reference's stored precision
            lp_ref = ref.chunk(c, device)
            target = tokens[c, ref.first + 1: ref.first + 1 + ref.scored].unsqueeze(-1)
            nll = -lp.gather(-1, target).squeeze(-1).double()
            nll_ref = -lp_ref.gather(-1, target).squeeze(-1).double()
            if ref.store == torch.float16:  # rounded to float16 a distribution sums to 1 only within ~1e-4, so a
                # tiny KLD (a unit alone) came out below zero: the KL of the two rounded distributions, each
                # renormalized, in float64 (a float32 sum of terms of ~1e-3 cancelling to ~1e-8 is off by ~1e-6)
                lp_ref, lp = lp_ref.double(), lp.double()
                q_ref, q = lp_ref - lp_ref.logsumexp(-1, keepdim=True), lp - lp.logsumexp(-1, keepdim=True)
            else:
                q_ref, q = lp_ref, lp
            kld = (q_ref.exp() * (q_ref - q)).sum(-1).double()
            for name, value in (("nll", nll), ("nll_ref", nll_ref), ("kld", kld),
                                ("same_top", (lp.argmax(-1) == lp_ref.argmax(-1)).double()),
                                ("p", (-nll).exp()), ("p_ref", (-nll_ref).exp()),
                                ("spread", (lp_ref.amax(-1) - lp_ref.amin(-1)).double())):
                parts[name].append(value.cpu().numpy())
    return {k: np.concatenate(v) for k, v in parts.items()}


def float_bytes(model, skip_head: bool) -> int:
    """Bytes of the model's float tensors outside the scheme-built linears: the embedding, the norms
    and (unless ``skip_head``: the scheme built it, its ledger counts it) the float LM head, each
    storage once (a tied head in the embedding's dtype shares its storage: counted once, as run)."""
    seen: dict[int, int] = {}
    for name, t in model.named_parameters():
        if name.startswith("blocks.") and "norm" not in name.rsplit(".", 1)[-1]:
            continue  # a block's linears: counted by their schemes' ledgers
        if skip_head and name.startswith("head."):
            continue
        seen[t.data_ptr()] = t.numel() * t.element_size()
    return sum(seen.values())


def measure_quality_scheme(scenario: Any, entry_index: int, device: torch.device, ceilings: Optional[dict] = None,
                           shared_dir: Optional[str] = None) -> list[dict]:
    """The row of ``scenario.schemes[entry_index]`` on ``device`` (see the module docstring).

    Never raises for the scheme's own failure: an unavailable scheme gives a ``skipped`` row, an
    exception while building or running a ``failed`` one (the exception described in one line).
    """
    entry = scenario.schemes[entry_index]
    scheme = entry.scheme
    q = scenario.quality
    ckpt, config, ids = _inputs(scenario)  # the scenario was checked when it was read (qbench.quality.spec.check)
    rows = [_blank(scenario, entry, scheme, device, ckpt, config, ids)]
    row = rows[0]
    plan = plan_of(entry, config.blocks)
    # every scheme the model is built with (one, or a recipe's): its kernel here, else emulated, else skipped
    parts: dict[str, tuple[Any, Any, bool, Optional[str]]] = {}  # label -> (scheme, choice, emulated, reason)
    for choice in plan.distinct(q.lm_head):
        part = schemes.get(choice.name)
        reason = part.unavailable_reason(device, choice.options)
        if reason and part.emulate is not None and "not installed" not in reason:
            parts[choice.label] = (part, choice, True, reason)
        elif reason:
            return _skip(rows, "skipped", reason if plan.recipe is None else f"{choice.label} (in the recipe): {reason}")
        else:
            parts[choice.label] = (part, choice, False, None)
    emulated = any(p[2] for p in parts.values())
    shape = plan.shape_reason(config.linear_shapes(), q.lm_head)
    if shape:
        return _skip(rows, "skipped", shape)
    tokens = chunk_tokens(scenario, ids, device, ckpt)
    ref = _Reference(scenario, config, ckpt, device, shared_dir or ".", tokens)
    widest = max((p[0] for p in parts.values()), key=lambda part: part.nominal_bits)
    need = estimate_bytes(config, widest, ref.dtype, not ref.path.exists(), q.sensitivity != "none", q.chunk, emulated)
    free = free_bytes(device)
    if free is not None and need + (HEADROOM if device.type == "cuda" else 0) > free:
        return _skip(rows, "skipped", f"needs about {need / 2**30:.1f} GiB of {device} memory (the model, its reference "
                                      f"and one chunk's logits), {free / 2**30:.1f} GiB free")
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    weights = Weights(config, scenario.seed, device, state_dict=None if ckpt is None else TensorMap(ckpt, str(device)))
    torch.manual_seed(scenario.seed)
    phases: dict[str, float] = {}
    try:
        t0 = time.perf_counter()
        ref.ensure(weights, tokens)
        phases["reference"] = time.perf_counter() - t0
    except Exception as exc:
        return _skip(rows, "failed", f"reference: {describe_exception(exc)}")
    act = scheme.activation_dtype
    calibration: dict = {}  # (block, role) -> the linear's input statistics, for the schemes that need them
    if any(p[0].needs_calibration for p in parts.values()):
        try:
            cal_ids = calibrate.check(scenario.model, q, scenario.source, [entry.label])
            calibration, collect_s = calibrate.collect(weights, cal_ids, (q.calibration.chunk or q.chunk), ref.dtype,
                                                       None if ckpt is None else ckpt.bos, q.lm_head)
        except Exception as exc:
            return _skip(rows, "failed", f"calibration: {describe_exception(exc)}")
        row["calibration"] = dict(calibrate.record(scenario, len(cal_ids)), collect_s=collect_s)
        phases["calibration"] = collect_s

    built_by: dict[str, list] = {label: [] for label in parts}  # the modules each scheme built
    calibrated: list[tuple[int, int]] = []  # (calibration tokens, K) of each linear built from calibration

    def build(w: torch.Tensor, b: Optional[torch.Tensor], block: int, role: str):
        part, choice, part_emulated, _ = parts[plan.choice(block, role).label]
        make = part.emulate if part_emulated else part.build
        extra = {"calibration": calibration[(block, role)]} if part.needs_calibration else {}
        try:
            module = make(w, b, choice.options, **extra)
        except NotPositiveDefinite as exc:  # the statistics are per linear: say which
            raise NotPositiveDefinite(f"{'lm_head' if block < 0 else f'block {block} {role}'}: {exc}") from None
        if extra:
            calibrated.append((extra["calibration"].tokens, w.shape[1]))
        built_by[choice.label].append(module)
        return module

    kept: list[dict] = []
    t0 = time.perf_counter()
    log.info("%s: building %s (%s)", entry.label, config.title, "emulated" if emulated else "the scheme's kernels")
    try:
        model = build_model(weights, build, act, head=build if q.lm_head else None, keep=kept)
    except Exception as exc:
        return _skip(rows, "failed", f"build: {describe_exception(exc)}")
    phases["build"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    log.info("%s: %d chunks of %d tokens", entry.label, tokens.shape[0], q.chunk)
    try:
        per = _per_token(model, tokens, ref, device, FP8_KV if q.kv_cache == "fp8" else None)
    except Exception as exc:
        return _skip(rows, "failed", f"run: {describe_exception(exc)}")
    phases["run"] = time.perf_counter() - t0
    wrong = non_finite(per, scheme.activation_dtype, ref.dtype) or constant_reference(per, config.vocab)
    if wrong:
        return _skip(rows, "failed", wrong)
    stats = qstats.summarize(per["nll"], per["nll_ref"], per["kld"], per["same_top"], per["p"], per["p_ref"])
    if (wrong := overflowed(stats)):
        return _skip(rows, "failed", wrong)
    row["stats"] = stats
    row["emulated"] = emulated
    solved = [m.calibration_notes["solve_s"] for mods in built_by.values() for m in mods
              if hasattr(m, "calibration_notes")]
    if solved:
        row["calibration_s"] = sum(solved) + phases.get("calibration", 0.0)
        if row.get("calibration"):
            row["calibration"]["solve_s"] = sum(solved)
            diag = {label: calibrate.diagnostics([getattr(m, "calibration_notes", {}) for m in mods])
                    for label, mods in built_by.items() if parts[label][0].needs_calibration}
            if any(diag.values()):
                row["calibration"]["diagnostics"] = {label: d for label, d in diag.items() if d}
    row["recipe"] = plan.record(q.lm_head, {label: "emulated" if p[2] else "kernel" for label, p in parts.items()})
    row["reference"] = {"dtype": _dtype_name(ref.dtype), "logprobs": _dtype_name(ref.store), "computed_s": ref.computed_s}
    if q.kv_cache == "fp8":
        row["kv_cache"] = {**KV_FP8_RECORD, "bytes_per_token": config.blocks * config.kv_elements_per_position()}
    if not emulated:  # each linear counted by the scheme that built it
        linear = sum(ledger.count(parts[plan.choice(b, role).label][0].parts(mod)).stored_bytes
                     for b, block in enumerate(kept) for role, mod in block.items())
        if q.lm_head:
            linear += ledger.count(parts[plan.choice(-1, "lm_head").label][0].parts(model.head)).stored_bytes
        other = float_bytes(model, skip_head=q.lm_head)
        row["linear_stored_bytes"], row["model_stored_bytes"] = int(linear), int(linear + other)
    flags = []
    uniform = uniform_reference(row["stats"]["ref_ppl"], config.vocab)
    if uniform and ckpt is not None:  # seeded weights are flagged synthetic-weights below
        flags.append(flag_record("input-fault", uniform))
    said = []  # one flag, each emulated scheme of the model (a recipe may hold several) in it
    for part, choice, part_emulated, reason in parts.values():
        if not part_emulated:
            continue
        estimate = ("; its activations are fake-quantized per token, which the kernel's own quantization and "
                    "accumulation differ from: an estimate (docs/quality.md)") \
            if any(getattr(m, "estimate", False) for mod in built_by[choice.label] for m in mod.modules()) else ""
        which = "" if plan.recipe is None else f" (the recipe's {choice.label} linears)"
        said.append(f"no {part.name} kernel on {device.type} ({reason}): its quantized weights were dequantized "
                    f"and run in a float matmul{which}{estimate}")
    if said:
        flags.append(flag_record("emulated", "; ".join(said)))
    if (few := few_calibration_tokens(calibrated)):
        flags.append(flag_record("few-calibration-tokens", few))
    if ckpt is None:
        flags.append(flag_record("synthetic-weights", "seeded weights, not a trained model: the quality numbers say "
                                                      "nothing of a real model (the row shows the job's speed)"))
    elif (ckpt.folder / "qbench-prequantized.json").is_file():
        note = json.loads((ckpt.folder / "qbench-prequantized.json").read_text(encoding="utf-8")).get("note", "")
        flags.append(flag_record("prequantized-weights", note or "the checkpoint's weights already sit on a "
                                 "quantization grid: errors of schemes on that grid are biased low"))
    if entry.options.mode == "compiled":
        flags.append(flag_record("not-compiled", "quality is measured on the eager module (the compiled graph runs the "
                                                 "same kernels; fused epilogues may round differently)"))
    if q.sensitivity != "none":
        t0 = time.perf_counter()
        try:
            row["sensitivity"] = _sensitivity(q.sensitivity, weights, kept, model, ref, tokens, device, act, q.lm_head)
            row["sensitivity_by"] = q.sensitivity
        except Exception as exc:
            flags.append(flag_record("input-fault", f"sensitivity not measured: {describe_exception(exc)}"))
        phases["sensitivity"] = time.perf_counter() - t0
    row["flags"] = flags
    row["wall_s"] = phases
    if device.type == "cuda":
        row["peak_memory_bytes"] = int(torch.cuda.max_memory_allocated(device))
        row["peak_memory_source"] = "torch.cuda.max_memory_allocated (this worker)"
    else:
        import resource

        row["peak_memory_bytes"] = int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024
        row["peak_memory_source"] = "getrusage ru_maxrss (this worker process, resident)"
    return [QualityRow.model_validate(row).model_dump(mode="json", exclude_none=True)]


#: A reference whose perplexity is above this share of the vocabulary size is no better than
#: guessing uniformly (PPL = vocabulary): a degenerate model, whose rows would all read "ok", KLD 0.
DEGENERATE_PPL_SHARE = 0.9
#: Reference log-probabilities of one token spanning less than this (nats) are constant logits.
CONSTANT_LOGITS = 1e-6


def non_finite(per: dict[str, np.ndarray], act: torch.dtype, ref_dtype: torch.dtype) -> Optional[str]:
    """Why the per-token values of a scheme (:func:`_per_token`) hold NaN or Inf, naming the
    statistics and the likely cause, or None when every value is finite."""
    bad = {k: int((~np.isfinite(v)).sum()) for k, v in per.items() if k != "spread" and not np.isfinite(v).all()}
    if not bad:
        return None
    total = next(iter(per.values())).size
    said = ", ".join(f"{k} on {n} of {total} scored tokens" for k, n in bad.items())
    if "nll_ref" in bad:
        return (f"non-finite statistics ({said}): the {_dtype_name(ref_dtype)} reference's log-probabilities are "
                f"NaN or Inf (a weight or a config value that overflows the model)")
    cause = (f"likely {_dtype_name(act)} overflow: the model's activations exceed {_dtype_name(act)}'s range "
             f"({torch.finfo(act).max:.4g}) while the reference's are finite") if act in (torch.float16, torch.bfloat16) \
        else "the scheme's logits are NaN or Inf while the reference's are finite"
    return f"non-finite statistics ({said}): {cause}"


def overflowed(stats: dict) -> Optional[str]:
    """Why statistics computed from finite per-token values are not finite (a perplexity beyond float
    range: e^(mean NLL) with a mean NLL in the hundreds of nats), naming them, or None."""
    bad = [k for k, v in stats.items() if isinstance(v, float) and not math.isfinite(v)]
    bad += [k for k in ("ppl", "ref_ppl", "ppl_ratio") if stats.get(k) == 0.0]  # e^x underflowed
    if not bad:
        return None
    return (f"non-finite statistics ({', '.join(bad)}): a perplexity or perplexity ratio beyond float range (e^x of "
            "a mean NLL, or of a difference of two, in the hundreds of nats): a weight or a config value far out of "
            "range in the checkpoint")


def constant_reference(per: dict[str, np.ndarray], vocab: int) -> Optional[str]:
    """Why the reference is degenerate beyond use (its log-probabilities constant on every scored
    token: every scheme would read "ok", KLD 0), or None."""
    if float(per["spread"].max()) >= CONSTANT_LOGITS:
        return None
    return (f"degenerate reference: its logits are constant on every scored token (perplexity "
            f"{float(np.exp(per['nll_ref'].mean())):.6g}, the vocabulary is {vocab}): a weight or config value that "
            f"saturates the model (a huge weight, an infinite rms_norm_eps); no statistic would mean anything")


def uniform_reference(ref_ppl: float, vocab: int) -> Optional[str]:
    """Why the reference predicts no better than a uniform guess (perplexity at least
    :data:`DEGENERATE_PPL_SHARE` of the vocabulary size: untrained or broken weights), or None."""
    if ref_ppl < DEGENERATE_PPL_SHARE * vocab:
        return None
    return (f"degenerate reference: perplexity {ref_ppl:.6g}, at least {DEGENERATE_PPL_SHARE:.0%} of the vocabulary "
            f"({vocab}): the model predicts no better than a uniform guess (untrained or broken weights), so its "
            f"statistics say nothing of a real model")


def _sensitivity(by: str, weights: Weights, kept: list[dict], model: Llama, ref: _Reference, tokens: torch.Tensor,
                 device: torch.device, act: torch.dtype, head: bool = False) -> list[dict]:
    """Each of the seven block roles, in every block at once (``by = "role"``; the LM head is not
    ranked, even when the scheme built it: it is not a block role), or each block (``"block"``)
    quantized alone: the reference model (float linears in the reference dtype)
    with that part's scheme modules in place, run at the scheme's activation dtype inside. Ranked by
    mean KL divergence, largest first. ``"unit"``: :func:`_unit_sensitivity` (the LM head too when
    ``head``: the scheme built it)."""
    config = weights.config
    ref_linears: list[dict] = []
    base = build_model(weights, float_builder(ref.dtype), ref.dtype, keep=ref_linears)
    if by == "unit":
        return _unit_sensitivity(base, ref_linears, kept, model.head if head else None, ref, tokens, act)
    parts = list(BLOCK_LINEARS) if by == "role" else [f"block {b}" for b in range(config.blocks)]
    out = []
    for part in parts:
        for b, block in enumerate(base.blocks):
            for role in BLOCK_LINEARS:
                quantized = part == role or part == f"block {b}"
                setattr(block, role, Cast(kept[b][role], act) if quantized else ref_linears[b][role])
        out.append({"part": part, **_damage(_per_token(base, tokens, ref, device))})
    return sorted(out, key=lambda r: -r["kld"])


def _damage(per: dict[str, np.ndarray]) -> dict:
    """A part's mean KL divergence (nats) with its uncertainty, same-top share and perplexity ratio."""
    kld, kld_unc = qstats.mean_and_uncertainty(per["kld"])
    return {"kld": kld, "kld_unc": kld_unc, "same_top": float(per["same_top"].mean()),
            "ppl_ratio": float(np.exp(per["nll"].mean() - per["nll_ref"].mean()))}


def _unit_sensitivity(base: Llama, ref_linears: list[dict], kept: list[dict], head: Optional[torch.nn.Module],
                      ref: _Reference, tokens: torch.Tensor, act: torch.dtype) -> list[dict]:
    """Each unit of each block (:data:`qbench.model.recipe.UNITS`: q/k/v, o, gate/up, down: the
    linears engines fuse, a per-layer search's decisions), then the LM head when ``head`` (the
    scheme's head module) is given, quantized alone inside the reference model ``base`` (its float
    linears ``ref_linears``; the scheme's modules ``kept``, run at activation dtype ``act``).

    One teacher-forced pass per unit, from the unit's block on: the reference's hidden state
    entering block ``b`` is computed once for every chunk and kept (``[1, chunk, hidden]`` a
    chunk), so a unit of block ``b`` runs blocks ``b ..`` and the head on the scored positions
    only; the head unit runs the head alone on the final hidden state. Same numbers as a whole
    forward (the blocks before ``b`` are the reference's either way) up to the head's GEMM shape.

    Returns: ``4 × blocks (+ 1)`` dicts, ranked by mean KL divergence, largest first: ``part`` (``"block 3 attn_in"`` or
    ``"lm_head"``), ``block`` (None for the head), ``unit``, ``roles``, ``kld``, ``kld_unc``,
    ``same_top``, ``ppl_ratio``."""
    device, n, t = tokens.device, tokens.shape[0], tokens.shape[1]
    lo, hi = ref.first, ref.first + ref.scored

    def tail(start: int, x: torch.Tensor) -> torch.Tensor:  # [1, T, hidden] entering block start -> scored logits
        cos, sin = rope
        for block in list(base.blocks)[start:]:
            x = base.block_call(block, x, cos, sin, None, 0)
        return base.head(rms_norm(x[0, lo:hi], base.norm, base.config.rms_eps)).float()

    out = []
    ref.hold(device)  # 4 x blocks (+ 1) passes read every chunk's reference: read once from the file, when it fits
    try:
        with torch.inference_mode():
            rope = base.rope(0, t, device)
            xs = [torch.nn.functional.embedding(tokens[c][None], base.embed) for c in range(n)]  # entering block 0
            for b, block in enumerate(base.blocks):
                for unit, roles in UNITS.items():
                    for role in roles:
                        setattr(block, role, Cast(kept[b][role], act))
                    try:
                        per = _per_token(base, tokens, ref, device, logits_of=lambda c: tail(b, xs[c]))
                    finally:
                        for role in roles:
                            setattr(block, role, ref_linears[b][role])
                    out.append({"part": f"block {b} {unit}", "block": b, "unit": unit, "roles": list(roles),
                                **_damage(per)})
                xs = [base.block_call(block, x, *rope, None, 0) for x in xs]  # the reference's input to block b + 1
            if head is not None:
                float_head, base.head = base.head, Cast(head, act)
                try:
                    per = _per_token(base, tokens, ref, device, logits_of=lambda c: tail(len(base.blocks), xs[c]))
                finally:
                    base.head = float_head
                out.append({"part": "lm_head", "block": None, "unit": "lm_head", "roles": ["lm_head"],
                            **_damage(per)})
    finally:
        ref.release()
    return sorted(out, key=lambda r: -r["kld"])


class Cast(torch.nn.Module):
    """A linear module run at another activation dtype: input cast to ``dtype``, output back to the
    caller's (a part quantized alone inside the reference model, :func:`_sensitivity`)."""

    def __init__(self, inner: torch.nn.Module, dtype: torch.dtype):
        super().__init__()
        self.inner, self.dtype = inner, dtype

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x.to(self.dtype)).to(x.dtype)
