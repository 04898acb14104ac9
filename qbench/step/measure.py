"""Measure one scheme of a model-step scenario in the current process: one row per (M, context).

Called by :mod:`qbench.worker` for a scenario with a ``[model]`` table (one worker per scheme, like
a layer scenario). In order:

1. **Skips**: the scheme cannot run here, cannot take one of the model's linear shapes (its group
   or block size, a kernel constraint), or an M: skipped rows naming the reason.
2. **Build**: the seven linear layers of each block from seeded FP32 weights (distinct per block,
   so every step streams every weight from HBM), the LM head (the scheme's when
   ``quantize_lm_head``, else a float layer in the activation dtype), the embedding and norms. On
   CUDA, block 0 is built first and its memory measured; as many blocks are built as fit beside the
   largest KV cache and a workspace (fewer than the model has: the step is extrapolated, 5 below).
   An entry with a mixed recipe builds each linear with the recipe's scheme for its (block, role)
   (:class:`qbench.model.recipe.Plan`), and the step's bytes count every block with its own schemes.
3. **Cache**: per context, a prefill of one seeded prompt (bf16 on CUDA, FP32 on the CPU) through
   the blocks fills positions ``0 .. context - 1``; each of the M sequences gets a copy (the step
   still reads M distinct caches) and decodes its own seeded token at position ``context``. Every
   scheme's worker fills the same cache (same seed, same weights), so the steps of all schemes
   read identical histories.
4. **Error**: the step's logits against the FP32 step (:func:`qbench.model.llama.reference_logits`)
   on the same tokens and cache.

The prefill, the step and the FP32 reference all run the model library's one forward
(:class:`qbench.model.llama.Llama`; the step is its :class:`~qbench.model.llama.Decoder`).
5. **Timing**, by the step methods of the timing registry (:mod:`qbench.timing.step_graph`,
   ``step_compiled``, ``step_reduce_overhead``, ``step_cpu``), each saying what it includes; with
   fewer blocks built than the model has, each method also times the step of half the built blocks
   and the row's step is extrapolated linearly in the block count (both readings kept).
6. **Σ linear**: the ``stream`` time of each of the model's own linear layers (a CUDA graph calling
   that layer of every built block in turn: distinct weights from HBM, no launch gaps; the compiled
   module for a compiled scheme) times the count per step: the layer view of the same step,
   measured in the same process.

Each phase is logged (logger ``qbench.step``, INFO) before it starts: a worker sends its log to its
log file, so a worker that hangs or times out is reported with the phase it was in (the runner's
"last output"): the H200 runs of 2026-12-02 lost three ``fp8-weight-only+compiled`` workers to
timeouts that said nothing more.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Optional

import torch

from qbench import compile_info, schemes
from qbench.model.checkpoint import TensorMap, of_model, weight_source
from qbench.schemes import ledger
from qbench.model import llama
from qbench.step import floor
from qbench.model.config import StepModelConfig
from qbench.env import cpu_busy
from qbench.gpu_state import record_reading
from qbench.memory import PROCESS_OVERHEAD
from qbench.row import (NOISY_CV, describe_exception, dtype_name, failed_rows, flag_record, is_noisy_cv,
                        reason_record)
from qbench.model.recipe import plan_of
from qbench.step.row import StepRow, check_rows
from qbench.step.spec import check as check_spec
from qbench.timing.settings import TimingSettings

#: Device memory kept free beyond the estimate (bytes): CUDA graphs' pools, cuBLAS workspaces,
#: the allocator's fragmentation. Project choice, from the H200 runs' peaks.
HEADROOM = 3 << 30
#: Positions per MLP chunk of the prefill (the forward's chunk).
PREFILL_CHUNK = llama.MLP_CHUNK

#: One INFO line per phase, before the phase: a worker's log file ends with the phase it is in.
log = logging.getLogger("qbench.step")


def _head_is_scheme(spec) -> bool:
    return bool(spec.lm_head and spec.quantize_lm_head)


#: The fp8 KV cache's scale rule, as rows state it.
FP8_SCALE_RULE = ("e4m3, static scale per (block, KV head) = absmax / 448 of the prefill's K (and V) of that head; "
                  "decode writes saturate at ±448 × scale")


def kv_dtype(kv_cache: str, activation: torch.dtype) -> torch.dtype:
    """The KV cache's dtype for ``[model] kv_cache`` (``activation``: the scheme's activation dtype)."""
    return llama.FP8_KV if kv_cache == "fp8" else activation


def split_kv_reason(config: StepModelConfig, device: torch.device, fp8: bool) -> Optional[str]:
    """Why the split-KV kernel cannot run the step here (not CUDA, no Triton, a head_dim it cannot
    take, fp8 loads on a GPU before compute capability 8.9), or None."""
    if device.type != "cuda":
        return f"the split-KV kernel runs on CUDA, this device is {device.type}"
    try:
        from qbench.model import splitkv
    except ImportError as exc:
        return f"Triton is not importable ({exc})"
    reason = splitkv.head_dim_reason(config.head_dim)
    if reason is None and fp8 and torch.cuda.get_device_capability(device) < (8, 9):
        reason = (f"the split-KV kernel reads fp8 with Triton's e4m3 loads, which need compute capability 8.9+, "
                  f"this GPU is {'.'.join(map(str, torch.cuda.get_device_capability(device)))}")
    return reason


def attention_choice(spec: Any, config: StepModelConfig, device: torch.device) -> dict:
    """The decode attention ``[model] attention`` gives on ``device``: ``{"kernel", "chosen", "skip"}``.
    ``auto`` takes split-KV where it can run (it reads the cache near the HBM floor at long context,
    where one SDPA call per (sequence, KV head) leaves most SMs idle), else SDPA, and says why;
    an explicit choice that cannot run here gives ``skip``, the rows' reason."""
    fp8 = spec.kv_cache == "fp8"
    if fp8 and not hasattr(torch, "float8_e4m3fn"):
        return {"kernel": spec.attention, "chosen": "scenario",
                "skip": f"this torch ({torch.__version__}) has no float8_e4m3fn dtype: it cannot hold an fp8 KV cache"}
    why_not = split_kv_reason(config, device, fp8)
    if spec.attention == "auto":
        if why_not is None:
            return {"kernel": "split-kv", "chosen": "auto: split-KV runs here (CUDA, Triton)", "skip": None}
        return {"kernel": "sdpa", "chosen": f"auto: SDPA, {why_not}", "skip": None}
    return {"kernel": spec.attention, "chosen": "scenario",
            "skip": why_not if spec.attention == "split-kv" else None}


def blank_rows(scenario: Any, entry, scheme, device) -> list[dict]:
    """(``scenario``: a :class:`qbench.scenario.Scenario` with a ``[model]`` table; not imported here:
    the scenario imports :mod:`qbench.step.spec`, and nothing of the step job imports back up.)
    One row per (context, M) with the identity filled and status ``ok`` (no measurement)."""
    spec = scenario.model
    config = check_spec(spec, scenario.source)
    lm = "none" if not spec.lm_head else ("scheme" if spec.quantize_lm_head else "float")
    ckpt = of_model(scenario.model, scenario.source)
    source = {} if ckpt is None else {"weight_source": weight_source(ckpt), "checkpoint_id": ckpt.identity}
    attn = attention_choice(spec, config, torch.device(device))  # (a caller may name the device as text)
    kv = {"dtype": dtype_name(kv_dtype(spec.kv_cache, scheme.activation_dtype))}
    return [StepRow(**source, attention={"kernel": attn["kernel"], "chosen": attn["chosen"]}, kv_cache=dict(kv),
                    scheme=entry.label, base_scheme=scheme.name, library=scheme.library, mode=entry.options.mode,
                    options=entry.options.model_dump(exclude={"label", "mode"}), model=spec.name or spec.config or spec.checkpoint,
                    title=config.title, m=m, context=context, device=str(device), weight_dtype=scheme.weight_dtype,
                    activation_dtype=dtype_name(scheme.activation_dtype), lm_head=lm, blocks=config.blocks,
                    recipe=plan_of(entry, config.blocks).record(_head_is_scheme(spec)),
                    ).model_dump() for context in spec.context for m in scenario.m]


def measure_step_scheme(scenario: Any, entry_index: int, device: torch.device,
                        ceilings: Optional[dict] = None, shared_dir: Optional[str] = None) -> list[dict]:
    """Rows (one per context and M) for ``scenario.schemes[entry_index]`` on ``device``.

    Never raises for the scheme's own failure: an unavailable scheme gives ``skipped`` rows, an
    exception while building gives ``failed`` rows, one while measuring a row fails that row (the
    producers' :func:`qbench.row.failed_rows`, the exception by
    :func:`qbench.row.describe_exception`). The rows are checked once, by the step job's row check
    (:func:`qbench.step.row.check_rows`).

    Raises:
        qbench.results.ResultsError: a row that does not fit :class:`qbench.step.row.StepRow` (a bug
            in the producer: the worker fails loudly instead of writing a row readers would misread).
    """
    rows = _measure(scenario, entry_index, device, ceilings)
    check_rows(rows, "step worker")
    return rows


def _measure(scenario: Any, entry_index: int, device: torch.device, ceilings: Optional[dict]) -> list[dict]:
    entry = scenario.schemes[entry_index]
    scheme = entry.scheme
    spec = scenario.model
    config = check_spec(spec, scenario.source)
    rows = blank_rows(scenario, entry, scheme, device)
    plan = plan_of(entry, config.blocks)
    parts = [(schemes.get(c.name), c) for c in plan.distinct(_head_is_scheme(spec))]  # one, or a recipe's
    named = (lambda c, why: why) if plan.recipe is None else (lambda c, why: f"{c.label} (in the recipe): {why}")
    reason = next((named(c, why) for part, c in parts if (why := part.unavailable_reason(device, c.options))), None)
    reason = reason or compile_info.cpu_compile_reason(entry.options.mode, device.type)
    reason = reason or plan.shape_reason(config.linear_shapes(), _head_is_scheme(spec))
    reason = reason or attention_choice(spec, config, device)["skip"]
    if reason:
        return failed_rows(rows, "skipped", reason)
    for row in rows:
        m_reason = next((named(c, why) for part, c in parts if (why := part.m_reason(row["m"], device, c.options))), None)
        if m_reason:
            failed_rows([row], "skipped", m_reason)
    if all(r["status"] != "ok" for r in rows):
        return rows
    torch.manual_seed(scenario.seed)
    if entry.options.mode == "compiled" and device.type == "cuda":
        log.info("%s: starting Inductor's compile pool", entry.label)
        compile_info.compile_in_parallel()  # a block is many kernels; the pool starts while the model is built
    t0 = time.perf_counter()
    log.info("%s: building %s", entry.label, config.name)
    try:
        built = _Built(scenario, config, scheme, entry, device)
    except Exception as exc:  # the scheme could not be built here: failed rows, the run goes on
        failed_rows([r for r in rows if r["status"] == "ok"], "failed", f"build: {describe_exception(exc)}")
        return rows  # (a row skipped for its M stays skipped)
    build_s = time.perf_counter() - t0
    ran = plan.record(_head_is_scheme(spec), {c.label: "kernel" for _, c in parts})  # the step job never emulates
    for row in rows:
        row["recipe"] = ran
    with torch.inference_mode():
        for context in spec.context:
            todo = [r for r in rows if r["context"] == context and r["status"] == "ok"]
            if not todo:
                continue
            log.info("%s: prefill of %d positions", entry.label, context)
            try:
                prompt_cache = built.prefill(context)
            except Exception as exc:
                failed_rows(todo, "failed", f"prefill: {describe_exception(exc)}")
                continue
            for row in todo:
                t1 = time.perf_counter()
                try:
                    built.measure(row, prompt_cache, ceilings)
                except Exception as exc:
                    failed_rows([row], "failed", f"run: {describe_exception(exc)}" + _fewer_blocks(exc, built))
                row["worker_phases_s"] = {"build": build_s, "row": time.perf_counter() - t1}
            del prompt_cache
            if device.type == "cuda":
                torch.cuda.empty_cache()
    return rows


def _fewer_blocks(exc: Exception, built: "_Built") -> str:
    """What a row that ran out of device memory can do about it: the blocks-that-fit estimate's count, and the
    ``[model] blocks`` key that builds fewer. Empty for another error."""
    if not isinstance(exc, torch.OutOfMemoryError):
        return ""
    said = f" ({built.blocks_built} of {built.config.blocks} blocks were built, by the estimate of what fits unless " \
           "[model] blocks set it; "
    if built.blocks_built <= 1:  # one block is the fewest the step extrapolates from
        return said + "no fewer can be built: a smaller M or context, or a device with more memory)"
    return said + f"[model] blocks = {max(1, built.blocks_built - 2)} builds fewer and extrapolates)"


#: How far under its HBM floor the attention may read before the row is flagged ``above-ceiling``: the floor uses
#: the copy bandwidth (a read and a write per byte), which a read-only stream beats by a few % on an H100
#: (an SDPA attention at 1.048 of its floor: results/h100/step_llama31_8b_sdpa.json, bf16, M = 16, 32,768).
ATTENTION_FLOOR_MARGIN = 0.10


class _Built:
    """The scheme's model parts, built once per worker and reused for every (context, M)."""

    def __init__(self, scenario: Any, config: StepModelConfig, scheme, entry, device: torch.device):
        self.scenario, self.config, self.scheme, self.entry, self.device = scenario, config, scheme, entry, device
        self.spec = scenario.model
        self.plan = plan_of(entry, config.blocks)
        self.linear_bytes: dict[tuple[str, str], int] = {}  # (role, scheme label) -> stored bytes of one such linear
        self.act = scheme.activation_dtype
        self.kv = kv_dtype(self.spec.kv_cache, self.act)
        self.attention = attention_choice(self.spec, config, device)["kernel"]
        self.prefill_dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
        self.compiled = entry.options.mode == "compiled"
        if self.compiled:  # before any compile: bf16+compiled is compiled as the torchao schemes are
            compile_info.tune_like_torchao()
        ckpt = of_model(scenario.model, scenario.source)
        tensors = None if ckpt is None else TensorMap(ckpt, str(device))
        self.weights = llama.Weights(config, scenario.seed, device, state_dict=tensors)
        self.capture_failure: Optional[str] = None
        self.compiled_fns: dict[str, Any] = {}
        # the scenario's timing knobs for one step: at most 5 warm-up steps, one step per graph
        t = scenario.timing
        self.settings = TimingSettings(**{**{k: getattr(t, k) for k in TimingSettings.model_fields},
                                          "warmup": min(t.warmup, 5), "graph_calls": 1})
        self.linear_by_m: dict[int, dict] = {}
        want = min(self.spec.blocks or config.blocks, config.blocks)
        self.linears: list[dict[str, torch.nn.Module]] = []
        before = torch.cuda.memory_allocated(device) if device.type == "cuda" else 0
        self.linears.append(self._build_block(0))
        n = want
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            # never below block 0's stored bytes: a tensor freed while it was built (an earlier step's, in one
            # process) makes the difference of allocated memory too small, even negative
            per_block = max(torch.cuda.memory_allocated(device) - before, self._block_bytes(0))
            n = min(want, self._blocks_that_fit(per_block))
            if n < 1:
                raise MemoryError(f"not even one block fits: a block takes {per_block / 2**30:.1f} GiB plus its KV cache")
        for i in range(1, n):
            self.linears.append(self._build_block(i))
        self.blocks_built = n
        self.block_bytes = [self._block_bytes(i) for i in range(config.blocks)]
        self.embed = self.weights.get("model.embed_tokens.weight").to(self.act)
        self.norm = self.weights.get("model.norm.weight")
        self.head: Optional[torch.nn.Module] = None
        self.head_bytes = 0
        if self.spec.lm_head:
            w = self.weights.get("lm_head.weight")
            if self.spec.quantize_lm_head:
                choice = self.plan.choice(-1, "lm_head")
                part = schemes.get(choice.name)
                self.head = part.build(w, None, choice.options)
                self.head_bytes = ledger.count(part.parts(self.head)).stored_bytes
            else:
                self.head = llama.FloatLinear(w.to(self.act))
                self.head_bytes = w.numel() * torch.empty((), dtype=self.act).element_size()
            del w
        self.norms = [(self.weights.get(f"model.layers.{i}.input_layernorm.weight"),
                       self.weights.get(f"model.layers.{i}.post_attention_layernorm.weight")) for i in range(n)]
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    # -- building ---------------------------------------------------------------------------
    def _build_block(self, index: int) -> dict[str, torch.nn.Module]:
        """Block ``index``'s seven linears with their biases, each built by its scheme
        (:meth:`Plan.choice`); the stored bytes of each (role, scheme) are counted from the first one built."""
        out = {}
        for role, choice in self.plan.block_choices(index).items():
            w = self.weights.get(llama.linear_name(index, role))
            part = schemes.get(choice.name)
            out[role] = part.build(w, self.weights.bias(index, role), choice.options)
            self.linear_bytes.setdefault((role, choice.label), ledger.count(part.parts(out[role])).stored_bytes)
            del w
        return out

    def _block_bytes(self, index: int) -> int:
        """Stored bytes of block ``index``'s seven linears, each by its own scheme. A (role, scheme)
        no built block holds (a recipe's kept block beyond the blocks that fit) is built once from
        that block's weight, counted and dropped."""
        total = 0
        for role, choice in self.plan.block_choices(index).items():
            key = (role, choice.label)
            if key not in self.linear_bytes:
                part = schemes.get(choice.name)
                mod = part.build(self.weights.get(llama.linear_name(index, role)), self.weights.bias(index, role),
                                 choice.options)
                self.linear_bytes[key] = ledger.count(part.parts(mod)).stored_bytes
                del mod
            total += self.linear_bytes[key]
        return total

    def _blocks_that_fit(self, per_block: int) -> int:
        """Blocks that fit in the free memory beside the largest KV cache, the embedding and LM head (the step's
        copies in the activation dtype, built after this estimate, and the FP32 pair the reference makes beside
        them), the prefill's one-block working set and the FP32 reference's (one block of FP32 weights and an FP32
        copy of one block's cache for :func:`~qbench.model.llama.reference_group`'s sequences at the largest M and
        context)."""
        c, itemsize = self.config, torch.empty((), dtype=self.kv).element_size()
        m, ctx = max(self.scenario.m), max(self.spec.context)
        cache_per_block = m * (ctx + 1) * c.kv_elements_per_position() * itemsize
        prompt_cache_per_block = (ctx + 1) * c.kv_elements_per_position() * 2
        torch.cuda.empty_cache()  # what this process's caching allocator holds unused goes back, and counts as free
        free = torch.cuda.mem_get_info(self.device)[0]
        act = torch.empty((), dtype=self.act).element_size()
        embed_head = 2 * c.vocab * c.hidden * (4 + act)  # each in FP32 (the reference's, or a source while built)
        # and in the activation dtype (built after this estimate): without it every M = 16, 32,768-position row of
        # Llama-3.1-8B on an H100 ran out of memory (results/h100/env/2026-12-06b)
        chunk = min(ctx, PREFILL_CHUNK)
        prefill_ws = (6 * c.block_linear_params() + ctx * (3 * c.hidden + 4 * c.heads * c.head_dim) * 2
                      + chunk * c.ffn * 2 * 3)
        group = llama.reference_group(c, m, ctx + 1)  # the reference's FP32 cache copy holds this many sequences
        reference_ws = (4 * c.block_linear_params() + 2 * group * (ctx + 1) * c.kv_elements_per_position() * 4
                        + m * c.vocab * 8)
        # and the contexts of workers the runner starts ahead after this estimate (one as each worker ends)
        ahead = 2 * PROCESS_OVERHEAD
        spare = free - embed_head - max(prefill_ws, reference_ws) - HEADROOM - ahead
        return int(spare // (per_block + cache_per_block + prompt_cache_per_block)) + 1  # block 0 is built already

    # -- per context ------------------------------------------------------------------------
    def prefill(self, context: int) -> llama.KVCache:
        """The shared prompt's K/V (one sequence, ``context + 1`` slots) for every built block, in the
        prefill dtype."""
        gen = torch.Generator(device="cpu").manual_seed(self.scenario.seed * 7919 + context)
        prompt = torch.randint(0, self.config.vocab, (1, context), generator=gen).to(self.device)
        cache = llama.KVCache.empty(self.config, 1, context + 1, self.prefill_dtype, self.device, self.blocks_built)
        llama.prefill(self.weights, cache, prompt, self.prefill_dtype)
        return cache

    # -- per row ----------------------------------------------------------------------------
    def _model(self, m: int, context: int, prompt_cache: llama.KVCache) -> llama.Decoder:
        """The step at ``context`` for ``m`` sequences: the built blocks, each sequence its own copy of
        the prompt's cache in the activation dtype."""
        blocks = [llama.Block(self.config, self.linears[i], self.norms[i][0], self.norms[i][1], self.act)
                  for i in range(len(prompt_cache))]
        model = llama.Llama(self.config, self.embed, blocks, self.norm, self.head, self.act)
        return llama.Decoder(model, prompt_cache.copies(m, self.kv), context, attention=self.attention)

    def measure(self, row: dict, prompt_cache, ceilings: Optional[dict]) -> None:
        m, context, dev = row["m"], row["context"], self.device
        if dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats(dev)
        model = self._model(m, context, prompt_cache)
        gen = torch.Generator(device="cpu").manual_seed(self.scenario.seed * 104729 + m * 131 + context)
        tokens = torch.randint(0, self.config.vocab, (m,), generator=gen).to(dev)
        row["blocks_built"] = self.blocks_built
        row["attention"]["splits"] = model.splits
        row["attention"]["kv_read"] = ("as stored" if self.kv != llama.FP8_KV else
                                       "in kernel" if self.attention == "split-kv" else "before")
        log.info("%s M=%d context=%d: error against the FP32 step", self.entry.label, m, context)
        self._error(row, model, tokens, context, prompt_cache)
        self._time(row, model, tokens)
        log.info("%s M=%d context=%d: attention alone (%s)", self.entry.label, m, context, self.attention)
        self._attention_time(row, model)
        if self.spec.linear_sum:  # Σ linear does not depend on the context: measured once per M
            if m not in self.linear_by_m:
                self._linear_sum(row, model, m)
                self.linear_by_m[m] = row["linear"]
            else:
                row["linear"] = {**self.linear_by_m[m], "measured_at_context": self.linear_by_m[m].get("measured_at_context")}
        self._derive(row, ceilings)
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
            row["peak_memory_bytes"] = int(torch.cuda.max_memory_allocated(dev))
        del model

    def _error(self, row: dict, model: llama.Decoder, tokens: torch.Tensor, context: int,
               prompt_cache: llama.KVCache) -> None:
        """The step's error against the FP32 step. With an fp8 cache the reference reads the prompt's
        cache as a step in the activation dtype would hold it (what an activation-dtype row's reference
        reads), so the error includes the cache's rounding."""
        got = model.logits(tokens)
        group = llama.reference_group(self.config, tokens.shape[0], context + 1)
        if self.kv == llama.FP8_KV:
            ref = llama.reference_logits(self.weights, prompt_cache, tokens, context, lm_head=self.spec.lm_head,
                                         via=self.act, group=group)
        else:
            ref = llama.reference_logits(self.weights, model.cache, tokens, context, lm_head=self.spec.lm_head,
                                         group=group)
        row["error"] = step_error(got, ref, "logits" if self.spec.lm_head else "hidden")
        if self.blocks_built < self.config.blocks:
            row["error"]["blocks"] = self.blocks_built

    def _methods(self) -> list:
        """The step methods of the timing registry this row runs (the scenario's ``model.methods``
        that run on this device; a compiled method only for a compiled scheme), in run order."""
        from qbench.timing import registry

        return [m for m in registry.plan(self.spec.methods, self.device.type, job="step")
                if self.compiled or m.compiled is None]

    def _time(self, row: dict, model: llama.Decoder, tokens: torch.Tensor) -> None:
        """Each step method's reading (:meth:`qbench.timing.method.TimingMethod.run` on a
        :class:`~qbench.timing.method.Call` of the step): the step compiled first in the method's
        ``compiled`` mode; with fewer blocks built than the model has, at two block counts and
        extrapolated (:func:`_combine`). One error path: a method that raises gets its reason, and
        after a failed CUDA graph capture no later method of this worker is attempted."""
        from qbench.timing.method import Call
        from qbench.timing.warm import GraphCaptureError

        settings = self.settings
        counts = [self.blocks_built]
        if self.blocks_built < self.config.blocks:
            if self.blocks_built < 2:
                row["flags"].append(flag_record("extrapolated-from-one", f"only 1 of {self.config.blocks} blocks "
                                                "fits; the step is that block's times the block count"))
            else:
                counts = [self.blocks_built // 2, self.blocks_built]
        self.timed = []
        for method in self._methods():
            t0 = time.perf_counter()
            log.info("%s M=%d context=%d: %s", self.entry.label, row["m"], row["context"], method.name)
            stats_by_n = []
            try:
                if self.capture_failure and self.device.type == "cuda":
                    raise _NotAttempted(self.capture_failure)
                for n in counts:
                    call = Call(fn=self._step_call(model, tokens, n, method.compiled), device=self.device)
                    if method.compiled is None:
                        stats = method.run(call, settings).record
                    else:
                        stats = self._compiled_reading(row, call, lambda c: method.run(c, settings).record,
                                                       method.compiled)
                    stats_by_n.append(stats)
                row["latency_us"][method.name] = _combine(stats_by_n, counts, self.config.blocks)
                if len(stats_by_n) == 2:
                    ex = row["extrapolated"] or {"blocks": counts, "readings": {}}
                    ex["readings"][method.name] = [s["median"] for s in stats_by_n]
                    row["extrapolated"] = ex
                self.timed.append(method)
            except _NotAttempted as exc:
                row["latency_us"][method.name] = None
                row["latency_reasons"][method.name] = reason_record("not-attempted", f"not attempted: {exc}")
            except Exception as exc:
                why = describe_exception(exc)
                row["latency_us"][method.name] = None
                capture = isinstance(exc, GraphCaptureError)
                row["latency_reasons"][method.name] = reason_record("capture-failed" if capture else "error", why)
                if capture:
                    self.capture_failure = f"CUDA graph capture failed ({method.name}): {why}"
            finally:
                model.model.block_call, model.head_call = _eager_block, model._head
                row["worker_phases_s"] = {**row["worker_phases_s"], method.name: time.perf_counter() - t0}
            record_reading(row, method.name, self.device)
            if self.device.type == "cpu" and not any(f["name"] == "cpu-busy" for f in row["flags"]):
                text = cpu_busy(torch.get_num_threads())[1]  # other work shared the cores this step was timed on
                if text:
                    row["flags"].append(flag_record("cpu-busy", f"{method.name}: {text}"))
        if row["extrapolated"] is not None:
            n_small, n_large = counts
            kept = self.plan.kept()
            mixed = (f"; the recipe keeps blocks {', '.join(map(str, kept))} of {self.config.blocks} in "
                     f"{self.plan.recipe.keep_scheme.label}: the blocks not built are timed as the built ones "
                     "(their bytes are counted as they are)") if kept else ""
            row["flags"].append(flag_record("extrapolated", f"{n_large} of {self.config.blocks} blocks fit; each step "
                                            f"is t({n_large}) + ({self.config.blocks} - {n_large}) x (t({n_large}) - "
                                            f"t({n_small})) / {n_large - n_small} (both readings in 'extrapolated')"
                                            f"{mixed}"))

    # -- compiled forms ---------------------------------------------------------------------
    def _step_call(self, model: llama.Decoder, tokens: torch.Tensor, n: int, mode: Optional[str]) -> Callable[[], Any]:
        """The zero-argument step of ``n`` blocks in the form ``mode`` (None: eager) times. The
        decode loop's step (``reduce-overhead``) feeds itself, as gpt-fast's loop does: each call
        reads the tokens the previous call produced (cloned out of the CUDA-graph pool)."""
        if mode is None:
            model.model.block_call, model.head_call = _eager_block, model._head
        else:
            self._use_compiled(model, mode)
        if mode != "reduce-overhead":
            return lambda: model(tokens, n)
        state = {"tokens": tokens}

        def loop_step() -> None:
            state["tokens"] = model(state["tokens"], n).clone()

        return loop_step

    def _use_compiled(self, model: llama.Decoder, mode: str) -> None:
        """Point the model's block and head calls at their compiled forms in ``mode`` (compiled once
        per worker and mode: one function for every block, one for the head)."""
        compile_info.allow_recompiles(64)
        if mode not in self.compiled_fns:
            compile_mode = None if mode == "default" else mode
            self.compiled_fns[mode] = (torch.compile(_eager_block, mode=compile_mode, dynamic=False),
                                       torch.compile(_head_fn, mode=compile_mode, dynamic=False))
        block_fn, head_fn = self.compiled_fns[mode]
        model.model.block_call = block_fn
        model.head_call = lambda x: head_fn(model, x)

    def _compiled_reading(self, row: dict, call, timed: Callable, mode: str) -> dict:
        """Compile (a first call, outside the timed region), then ``timed(call)``; the compile
        record goes to ``row["compile"]``. With CUDA-graph trees (``reduce-overhead``) the step's
        start is marked before that call, or each block's call is taken for a new step and the
        previous block's output is overwritten while still in use."""
        before = _counters()
        log.info("%s M=%d context=%d: first call of the %s compiled step (compiling)", self.entry.label,
                 row["m"], row["context"], mode)
        t0 = time.perf_counter()
        if mode == "reduce-overhead":
            torch.compiler.cudagraph_mark_step_begin()
        call.fn()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        first = time.perf_counter() - t0
        after = _counters()
        record = row["compile"] or {}
        record.setdefault("first_call_s", []).append(first)
        record["compile_threads"], record["inductor"] = compile_info.compile_threads(), compile_info.inductor_settings()
        for key in after:
            record[key] = record.get(key, 0) + after[key] - before[key]
        row["compile"] = record
        return timed(call)

    # -- attention alone --------------------------------------------------------------------
    def _attention_time(self, row: dict, model: llama.Decoder) -> None:
        """The step's decode attention timed on its own at the row's shapes (``stream``: one CUDA
        graph calling it over every built block's cache in turn, so each call reads its own cache
        from HBM, as in the step; on a CPU the same calls in a loop): per layer, and × blocks per
        step. A random query in the activation dtype; the cache is the step's own."""
        from qbench.timing.stream import time_stream, time_stream_cpu

        c = self.config
        record = row["attention"]
        record["method"] = "stream"
        try:
            if self.capture_failure and self.device.type == "cuda":
                raise _NotAttempted(self.capture_failure)
            m = row["m"]
            q = torch.randn((m, c.kv_heads, c.heads // c.kv_heads, c.head_dim),
                            generator=torch.Generator(device="cpu").manual_seed(m * 31 + row["context"]),
                            dtype=torch.float32).to(self.device, self.act)
            slice_len = model.model.blocks[0].slice_len
            scale = model.model.blocks[0].scale
            calls = [(lambda layer=layer: llama.decode_attention(q, layer.k, layer.v, scale, layer.k_scale,
                                                                 layer.v_scale, slice_len)) for layer in model.cache]
            stats = (time_stream_cpu(calls, self.settings) if self.device.type == "cpu"
                     else time_stream(calls, self.settings))
            record["per_layer"] = stats.to_dict()
            record["us"] = stats.median * c.blocks
        except Exception as exc:
            record["reason"] = f"not attempted: {exc}" if isinstance(exc, _NotAttempted) else describe_exception(exc)

    # -- Σ linear ---------------------------------------------------------------------------
    def _linear_sum(self, row: dict, model: llama.Decoder, m: int) -> None:
        from qbench.timing.stream import time_stream, time_stream_cpu

        settings = self.settings
        shapes = self.config.linear_shapes()
        by_role: dict[str, dict] = {}
        total: Optional[float] = 0.0
        roles = list(llama.BLOCK_LINEARS) + (["lm_head"] if self.head is not None else [])
        for role in roles:
            k, n = shapes[role]
            per_step = self.config.blocks if role != "lm_head" else 1
            record: dict[str, Any] = {"k": k, "n": n, "count": per_step, "stream": None}
            log.info("%s M=%d: Σ linear, %s (K=%d, N=%d)", self.entry.label, m, role, k, n)
            try:
                if self.capture_failure and self.device.type == "cuda":
                    raise _NotAttempted(self.capture_failure)
                dtype = self.act
                x = torch.randn((m, k), generator=torch.Generator(device="cpu").manual_seed(k * 7 + n),
                                dtype=torch.float32).to(self.device, dtype)
                mods = [self.linears[i][role] for i in range(self.blocks_built)] if role != "lm_head" else [self.head]
                if self.compiled:  # one compiled function for every layer, as the step's blocks share one
                    if "linear" not in self.compiled_fns:
                        self.compiled_fns["linear"] = torch.compile(_linear_fn, dynamic=False)
                    fn = self.compiled_fns["linear"]
                    calls = [(lambda mod=mod: fn(mod, x)) for mod in mods]
                else:
                    calls = [(lambda mod=mod: mod(x)) for mod in mods]
                if role == "lm_head":  # one copy: the LM head alone is many times the L2 on a real model
                    calls = calls * 4
                stats = (time_stream_cpu(calls, settings) if self.device.type == "cpu" else time_stream(calls, settings))
                record["stream"] = stats.to_dict()
                record["copies"] = len(mods)
            except Exception as exc:
                record["reason"] = f"not attempted: {exc}" if isinstance(exc, _NotAttempted) else describe_exception(exc)
            by_role[role] = record
            if record["stream"] is None or total is None:
                total = None
            else:
                total += record["stream"]["median"] * per_step
        row["linear"] = {"method": "stream", "by_role": by_role, "sum_us": total, "measured_at_context": row["context"],
                         "includes": "Σ over the model's linear layers (every block, and the LM head when the step has one) "
                                     "of the layer's stream median: what the layer view predicts for the step"}

    # -- derived ----------------------------------------------------------------------------
    def _derive(self, row: dict, ceilings: Optional[dict]) -> None:
        itemsize = torch.empty((), dtype=self.act).element_size()
        kv_itemsize = torch.empty((), dtype=self.kv).element_size()
        scale_bytes = 2 * self.config.kv_heads * 4 if self.kv == llama.FP8_KV else 0  # K and V scales, fp32
        shape = dict(m=row["m"], context=row["context"], blocks=self.config.blocks)
        row["bytes"] = floor.step_bytes(self.config, **shape, block_weight_bytes=self.block_bytes,
                                        lm_head_bytes=self.head_bytes, act_itemsize=itemsize, kv_itemsize=kv_itemsize,
                                        kv_scale_bytes=scale_bytes)
        row["kv_cache"] = {**row["kv_cache"], "itemsize": kv_itemsize,
                           "scale": FP8_SCALE_RULE if self.kv == llama.FP8_KV else None,
                           **floor.kv_cache_bytes(self.config, **shape, kv_itemsize=kv_itemsize,
                                                  kv_scale_bytes=scale_bytes)}
        gbps = ((ceilings or {}).get("measured") or {}).get("memory_gbps")
        row["hbm_floor_us"] = floor.floor_us(row["bytes"]["total"], gbps)
        attn = row["attention"]
        attn["bytes"] = self.config.blocks * floor.attention_bytes(
            self.config, m=row["m"], context=row["context"], kv_itemsize=kv_itemsize, act_itemsize=itemsize,
            kv_scale_bytes=scale_bytes)
        attn["floor_us"] = floor.floor_us(attn["bytes"], gbps)
        if attn.get("us") and attn["floor_us"]:
            attn["floor_fraction"] = attn["floor_us"] / attn["us"]
            # a read-only stream beats the copy bandwidth by a few %: flagged beyond ATTENTION_FLOOR_MARGIN
            if attn["floor_fraction"] > 1.0 + ATTENTION_FLOOR_MARGIN:  # e.g. a CPU whose caches hold the KV cache
                row["flags"].append(flag_record("above-ceiling", f"attention {attn['us']:.3g} µs is more than "
                                                f"{ATTENTION_FLOOR_MARGIN:.0%} under its floor ({attn['floor_us']:.3g} "
                                                f"µs at {gbps:.0f} GB/s): the cache was read faster than the measured "
                                                "bandwidth (from caches, or the bandwidth is underestimated), so "
                                                "attention floor % overstates"))
        linear = (row["linear"] or {}).get("sum_us")
        for method, stats in row["latency_us"].items():
            if not stats:
                continue
            step = stats["median"]
            row["tokens_per_s"][method] = row["m"] / step * 1e6
            if row["hbm_floor_us"]:
                row["floor_fraction"][method] = row["hbm_floor_us"] / step
                if step < row["hbm_floor_us"]:
                    row["flags"].append(flag_record("below-floor", f"{method} {step:.0f} µs is under the HBM floor "
                                                    f"({row['hbm_floor_us']:.0f} µs): the measured bandwidth "
                                                    "underestimates this device"))
            attention_above = attn.get("us") is not None and attn["us"] > step * 1.02  # a part longer than the whole
            if attention_above:
                row["flags"].append(flag_record("attention-above-step", f"the attention timed alone, {attn['us']:.0f} "
                                                f"µs, exceeds the {method} step ({step:.0f} µs) by more than 2 %: "
                                                "one of the two readings is wrong (on a CPU: other work ran beside "
                                                "it); the split's rest is left out"))
            if linear is not None:
                row["remainder_us"][method] = step - linear
                row["remainder_share"][method] = (step - linear) / step
                other = step - linear - attn["us"] if attn.get("us") is not None and not attention_above else None
                if other is not None and other < 0:  # parts timed alone that add up to more than the whole
                    row["flags"].append(flag_record("split-above-step", f"Σ linear {linear:.0f} µs and the attention "
                                                    f"{attn['us']:.0f} µs, each timed alone, add up to more than the "
                                                    f"{method} step ({step:.0f} µs, by {-other / step:.1%}): a part's "
                                                    "reading is high or they overlap in the step; the rest is left "
                                                    "out"))
                elif other is not None:  # the step split three ways
                    row["other_us"][method] = other
                    row["other_share"][method] = other / step
                if linear > step * 1.02:
                    row["flags"].append(flag_record("linear-above-step", f"Σ linear {linear:.0f} µs exceeds the {method} "
                                                    f"step ({step:.0f} µs) by more than 2 %: the layer view overstates "
                                                    "this step"))
            if is_noisy_cv(stats.get("cv")):
                row["flags"].append(flag_record("noisy", f"{method} cv = {stats['cv']:.2f} (> {NOISY_CV})"))
        for method in getattr(self, "timed", []):  # a decode loop slower than its hand-captured twin
            loop, twin = row["latency_us"].get(method.name), row["latency_us"].get(method.twin or "")
            if method.compiled == "reduce-overhead" and loop and twin and loop["p10"] > twin["p90"]:
                row["flags"].append(flag_record("reduce-overhead-slower", f"the decode loop's {loop['median']:.0f} "
                                                f"µs/step exceeds the hand-captured compiled step ({twin['median']:.0f} "
                                                "µs) beyond both p10-p90 ranges: the compiled wrapper's host work per "
                                                "call is not hidden"))
        if self.compiled and row["compile"] is not None:
            c = row["compile"]
            if c.get("graphs_compiled", 0) == 0:
                row["flags"].append(flag_record("not-compiled", "torch.compile compiled no graph; the step ran eagerly"))
            if c.get("graph_breaks"):
                row["flags"].append(flag_record("graph-breaks", f"{c['graph_breaks']} graph break(s) in the compiled step"))
            if c.get("cudagraph_skips"):
                row["flags"].append(flag_record("cudagraphs-skipped", f"reduce-overhead skipped CUDA graphs "
                                                f"{c['cudagraph_skips']} time(s)"))


class _NotAttempted(Exception):
    pass


def _eager_block(block: llama.Block, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: llama.LayerCache,
                 pos: int) -> torch.Tensor:
    """One block of the step (the function compiled once per worker and mode: every block reuses
    its code, the block and its cache passed in as modules)."""
    return block(x, cos, sin, cache, pos)


def _linear_fn(mod: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """One linear layer ``mod`` on ``x`` (M, K) -> (M, N): compiled once per worker for Σ linear of a
    compiled scheme, the layer passed in (not compiled per module, which costs one Inductor
    compile per layer of the model: 224 for Llama-3-8B's blocks, minutes for a scheme whose linear
    lowers to a Triton kernel)."""
    return mod(x)


def _head_fn(model: llama.Decoder, x: torch.Tensor) -> torch.Tensor:
    return model._head(x)


def _counters() -> dict[str, int]:
    """Dynamo's graphs and graph breaks and Inductor's CUDA-graph skips so far in this process
    (:mod:`qbench.compile_info`; zeros before Dynamo is imported)."""
    return {"graphs_compiled": compile_info.graph_count(), "graph_breaks": compile_info.graph_break_count(),
            "cudagraph_skips": compile_info.cudagraph_skip_count()}


def _combine(stats_by_n: list[dict], counts: list[int], blocks: int) -> dict:
    """One reading: the step at ``counts[-1]`` blocks, or, with two counts, every time statistic
    extrapolated to ``blocks`` (:func:`qbench.step.floor.extrapolate`); ``n`` is the smaller."""
    if len(stats_by_n) == 1:
        out = dict(stats_by_n[0])
        if counts[0] < blocks:  # one block built: its time, block-count times
            for key in ("median", "p10", "p90", "mean"):
                out[key] = out[key] * blocks / counts[0]
        return out
    small, large = stats_by_n
    out = dict(large)
    for key in ("median", "p10", "p90", "mean"):
        out[key] = floor.extrapolate(small[key], large[key], counts[0], counts[1], blocks)
    out["n"] = min(small["n"], large["n"])
    for key in ("host_us", "synced_us"):
        if key in small and key in large:
            out[key] = floor.extrapolate(small[key], large[key], counts[0], counts[1], blocks)
    return out


def step_error(got: torch.Tensor, ref: torch.Tensor, compared: str) -> dict:
    """The step's error against the FP32 step.

    Args:
        got: the scheme's logits ``[M, vocab]`` (any float dtype), or the normed hidden state.
        ref: the FP32 step's, same shape.
        compared: ``"logits"`` or ``"hidden"``.

    Returns:
        ``{"rel_fro", "kl_div", "top1_agree", "nonfinite", "compared"}``: ``rel_fro`` =
        ||got - ref||_F / ||ref||_F; ``kl_div`` = mean over the M rows of KL(softmax(ref) ||
        softmax(got)) in nats (logits only); ``top1_agree`` = share of rows whose argmax agree
        (logits only); with non-finite values in ``got`` only ``nonfinite`` is set.
    """
    g, r = got.double(), ref.double()
    nonfinite = int((~torch.isfinite(g)).sum().item())
    out: dict[str, Any] = {"compared": compared, "nonfinite": nonfinite, "rel_fro": None, "kl_div": None,
                           "top1_agree": None}
    if nonfinite:
        return out
    denom = torch.linalg.vector_norm(r).item()
    out["rel_fro"] = torch.linalg.vector_norm(g - r).item() / denom if denom else None
    if compared == "logits":
        logp_ref, logp = torch.log_softmax(r, dim=-1), torch.log_softmax(g, dim=-1)
        kl = (logp_ref.exp() * (logp_ref - logp)).sum(-1)
        out["kl_div"] = max(0.0, kl.mean().item())
        out["top1_agree"] = (g.argmax(-1) == r.argmax(-1)).double().mean().item()
    return out
