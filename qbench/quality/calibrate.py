"""Calibration for the quality job: the span of text a calibrated scheme learns from, and the
statistics of each linear's input over it.

A scheme that chooses its int4 values from data (``Scheme.needs_calibration``: GPTQ, AWQ) gets, for
each linear, :class:`qbench.schemes.calibrated.LinearStats` of that linear's input in the float
reference model (the checkpoint's own weights in the reference dtype), run teacher-forced over the
calibration chunks; forward hooks, as torchao's GPTQ observer and AWQ observer collect them (not
sequentially: every linear sees the float model's activations, torchao's default).

::

    [quality]
    calibration = { text = "other.txt", chunks = 8 }                   # another text
    calibration = { chunks = 8, first_chunk = 4 }                       # a held-out span of the evaluated one

Keys: ``text`` (default: the evaluated text), ``chunks`` (required), ``chunk`` (tokens per chunk,
default ``quality.chunk``), ``first_chunk`` (the span starts ``first_chunk × chunk`` tokens in,
default 0). The span must exist in the text and must not hold the evaluated tokens: a model
calibrated on what it is scored on reads better than it is. On the evaluated text (the same bytes,
by sha256) the two token ranges must be disjoint; on any text, no calibration chunk may share a run
of :data:`WINDOW` tokens with the evaluated chunks (a copy with a byte more, a file holding the
evaluated one, a repeated passage). Each chunk's first token is the BOS, as in the evaluation.
"""

from __future__ import annotations

import time
from typing import Any, Optional

from qbench import schemes
from qbench.model.config import ConfigError
from qbench.model.recipe import plan_of
from qbench.quality.spec import (
    QualitySpec, check_chunk, check_scenario as check_quality_scenario, model_config, quality_model, read_tokens,
    resolve_path, text_file, text_sha256,
)
from qbench.tables import ScenarioError

#: Tokens in a run that a calibration chunk may not share with the evaluated chunks. Project choice:
#: long enough that a stage direction or a stock phrase of a real text does not trip it (Hamlet's
#: ``[Enter Horatio and Marcellus.]``, 32 byte tokens, recurs), short enough that any copied passage does.
WINDOW = 64


def calibrated_labels(scenario: Any, blocks: int) -> list[str]:
    """The labels of the scenario's entries whose model uses a scheme that needs calibration
    (the entry's own, or one of its recipe's)."""
    out = []
    for entry in scenario.schemes:
        choices = plan_of(entry, blocks).distinct(scenario.quality.lm_head)
        if any(schemes.get(c.name).needs_calibration for c in choices):
            out.append(entry.label)
    return out


def evaluated_span(quality: QualitySpec) -> tuple[int, Optional[int]]:
    """Token indices ``[start, end)`` of the evaluated text that the job scores chunks of (``end``
    None: every whole chunk to the end of the text). ``quality.first_chunk``, where a scenario
    has that key, moves the start."""
    start = (getattr(quality, "first_chunk", None) or 0) * quality.chunk
    return start, None if quality.chunks is None else start + quality.chunks * quality.chunk


def span(quality: QualitySpec) -> tuple[int, int]:
    """Token indices ``[start, end)`` of the calibration text that calibration reads."""
    c = quality.calibration
    chunk = c.chunk or quality.chunk
    return c.first_chunk * chunk, (c.first_chunk + c.chunks) * chunk


def shared_run(cal: list[int], cal_chunk: int, evaluated: list[int], eval_chunk: int,
               window: int = WINDOW) -> Optional[tuple[int, int, int, int]]:
    """The first calibration chunk that shares a run of ``window`` tokens (at most the chunk's length)
    with the ``evaluated`` tokens: ``(index in cal, its tokens inside shared runs, evaluated chunk
    index of its first run, calibration chunks sharing one)``, or None. Every run of the evaluated
    tokens is hashed once (a dict of hashed tuples: cheap); a hit is compared token by token."""
    w = min(window, cal_chunk, len(evaluated))
    if w < 1:
        return None
    seen = dict(zip(map(hash, zip(*(evaluated[i:] for i in range(w)))), range(len(evaluated))))
    first, count = None, 0
    for k in range(len(cal) // cal_chunk):
        piece = cal[k * cal_chunk:(k + 1) * cal_chunk]
        covered, where = set(), None
        for i, h in enumerate(map(hash, zip(*(piece[j:] for j in range(w))))):
            at = seen.get(h)
            if at is not None and evaluated[at:at + w] == piece[i:i + w]:
                covered.update(range(i, i + w))
                where = at if where is None else where
        if covered:
            count += 1
            if first is None:
                first = (k, len(covered), where // eval_chunk)
    return None if first is None else (*first, count)


def _spec_for(quality: QualitySpec) -> QualitySpec:
    """A ``[quality]`` table whose text and prefix are the calibration's (for :func:`read_tokens`)."""
    c = quality.calibration
    update = {"text": c.text or quality.text, "chunk": c.chunk or quality.chunk, "chunks": c.first_chunk + c.chunks,
              "calibration": None}
    if "first_chunk" in type(quality).model_fields:
        update["first_chunk"] = 0
    return quality.model_copy(update=update)


def check(model: Any, quality: QualitySpec, source: str, needed_by: list[str]) -> Optional[list[int]]:
    """The calibration's token ids (``chunks × chunk``), or None when the scenario has no
    ``quality.calibration``. Torch-free.

    Raises:
        ConfigError: ``quality.calibration``: absent while ``needed_by`` names entries that need it;
            ``quality.calibration.chunk``: beyond the model's positions (as ``quality.chunk``);
            ``quality.calibration.text``: unreadable, or too short for its span;
            ``quality.calibration.first_chunk``: the span overlaps the evaluated tokens of the same text;
            ``quality.calibration.text`` (``first_chunk`` when the text is the evaluated one): a
            calibration chunk shares a run of :data:`WINDOW` tokens with the evaluated chunks.
    """
    c = quality.calibration
    if c is None:
        if needed_by:
            raise ConfigError("quality.calibration", f"{', '.join(needed_by)} choose their values from calibration "
                                                     "activations: add [quality] calibration = { text = \"FILE\", "
                                                     "chunks = N } (or a held-out span: { chunks = N, first_chunk = "
                                                     "M } of the evaluated text), got none")
        return None
    if c.chunk is not None:  # quality.chunk's own limits, before a token is read
        check_chunk(model_config(model, source), c.chunk, "quality.calibration.chunk")
    cal = _spec_for(quality)
    try:
        path = text_file(cal, source)
        ids = read_tokens(model, cal, source)
    except ConfigError as exc:
        if exc.key != "quality.text":
            raise
        raise ConfigError("quality.calibration.text", exc.message) from None
    start, end = span(quality)
    if len(ids) < end:
        raise ConfigError("quality.calibration.text", f"{path} holds {len(ids)} tokens, fewer than the calibration "
                                                      f"span needs (first_chunk {c.first_chunk} + chunks {c.chunks}) "
                                                      f"x chunk {cal.chunk} = {end}")
    evaluated = resolve_path(quality.text, source)
    e0, e1 = evaluated_span(quality)
    if text_sha256(path) == text_sha256(evaluated):
        if start < (e1 if e1 is not None else float("inf")) and e0 < end:
            what = f"[{e0}, {e1})" if e1 is not None else f"[{e0}, end of text) (quality.chunks not given: every chunk)"
            after = "" if e1 is None else f"; a span after it starts at first_chunk >= {-(-e1 // cal.chunk)}"
            raise ConfigError("quality.calibration.first_chunk",
                              f"the calibration span, tokens [{start}, {end}) of {path.name}, overlaps the evaluated "
                              f"tokens {what} of the same text: a model calibrated on what it is scored on reads "
                              f"better than it is{after}, got {c.first_chunk}")
    eval_ids = read_tokens(model, quality, source)
    e1 = e1 if e1 is not None else len(eval_ids) // quality.chunk * quality.chunk
    hit = shared_run(ids[start:end], cal.chunk, eval_ids[e0:e1], quality.chunk)
    if hit is not None:
        k, n, j, count = hit
        key, value = ("quality.calibration.text", c.text) if c.text is not None else \
            ("quality.calibration.first_chunk", c.first_chunk)
        raise ConfigError(key, f"calibration chunk {c.first_chunk + k} of {path.name} (tokens "
                               f"[{start + k * cal.chunk}, {start + (k + 1) * cal.chunk})) repeats {n} of its "
                               f"{cal.chunk} tokens from evaluated chunk {e0 // quality.chunk + j} of "
                               f"{evaluated.name} (runs of {min(WINDOW, cal.chunk)} tokens; {count} of {c.chunks} "
                               f"calibration chunks do): a model calibrated on what it is scored on reads better "
                               f"than it is; calibrate on text the evaluation does not hold, got {value!r}")
    return ids[start:end]


def check_scenario(scenario: Any) -> None:
    """A quality scenario's checks (:func:`qbench.quality.spec.check_scenario`), then its calibration's
    (:func:`check`): the job registry's ``check`` of the quality kind. Torch-free.

    Raises:
        ScenarioError: the key at fault and why."""
    check_quality_scenario(scenario)
    blocks = quality_model(scenario).blocks
    try:
        check(scenario.model, scenario.quality, scenario.source, calibrated_labels(scenario, blocks))
    except ConfigError as exc:
        raise ScenarioError(scenario.source, exc.key, exc.message) from None


def record(scenario: Any, n_tokens: int) -> dict:
    """The row's ``calibration`` record: the text, its sha256, the span and its token count (the
    producer adds the seconds and each scheme's :func:`diagnostics`)."""
    q = scenario.quality
    c = q.calibration
    text = resolve_path(c.text or q.text, scenario.source)
    start, end = span(q)
    return {"text": str(text), "text_sha256": text_sha256(text), "first_chunk": c.first_chunk, "chunks": c.chunks,
            "chunk": c.chunk or q.chunk, "span": [start, end], "tokens": n_tokens}


def diagnostics(notes: list[dict]) -> dict:
    """What one calibrated scheme's linears say of their solve (each layer's ``calibration_notes``,
    :mod:`qbench.schemes.calibrated`), summed up small enough for a row: ``linears``; AWQ's chosen α
    (``alpha_min`` / ``alpha_mean`` / ``alpha_max``; 0 is round-to-nearest) and its error on the
    calibration activations over RTN's (``loss_vs_rtn_mean`` / ``_max``, at most 1); GPTQ's input
    channels never active in the calibration text (``dead_channels``, summed over linears, and
    ``linears_with_dead_channels``): their weight columns were zeroed. {} when no linear has notes."""
    notes = [n for n in notes if n]
    if not notes:
        return {}
    out: dict = {"linears": len(notes)}
    alphas = [n["alpha"] for n in notes if "alpha" in n]
    if alphas:
        ratios = [n["loss_vs_rtn"] for n in notes if "loss_vs_rtn" in n]
        out.update(alpha_min=min(alphas), alpha_mean=sum(alphas) / len(alphas), alpha_max=max(alphas),
                   loss_vs_rtn_mean=sum(ratios) / len(ratios), loss_vs_rtn_max=max(ratios))
    dead = [n["dead_channels"] for n in notes if "dead_channels" in n]
    if dead:
        out.update(dead_channels=sum(dead), linears_with_dead_channels=sum(d > 0 for d in dead))
    return out


def input_digests(scenario: Any) -> dict:
    """The calibration text's sha256 under the row key that records it (``calibration.text_sha256``;
    empty without ``quality.calibration``): ``--resume`` refuses kept rows calibrated on other bytes
    of the same path, as it refuses an edited evaluated text."""
    c = scenario.quality.calibration
    if c is None:
        return {}
    return {"calibration.text_sha256": text_sha256(resolve_path(c.text or scenario.quality.text, scenario.source))}


def collect(weights: Any, ids: list[int], chunk: int, dtype: Any, bos: Optional[int], head: bool) -> tuple[dict, float]:
    """Each linear's :class:`~qbench.schemes.calibrated.LinearStats` over the calibration token ``ids``,
    run as ``len(ids) // chunk`` teacher-forced chunks (first token ``bos`` when given) through the
    float model in ``dtype`` built from ``weights`` (:class:`qbench.model.llama.Weights`), with the
    LM head's input too when ``head``. Linears fed the same tensor (q, k and v; gate and up) share
    one record. Returns ``{(block, role): stats}`` (block -1 for ``lm_head``) and the seconds taken.
    """
    import torch

    from qbench.model.llama import FloatLinear, build_model
    from qbench.schemes.calibrated import LinearStats

    t0 = time.perf_counter()
    found: dict[tuple[int, str], LinearStats] = {}
    owners: set[tuple[int, str]] = set()  # the keys that accumulate (the first linear fed each tensor)
    last: dict[str, Any] = {"x": None, "stats": None}

    class Observed(torch.nn.Module):
        """A float linear that adds its input to its key's statistics (shared with the previous
        linear when that one was fed the very same tensor)."""

        def __init__(self, inner: torch.nn.Module, key: tuple[int, str], k: int):
            super().__init__()
            self.inner, self.key, self.k = inner, key, k

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if self.key not in found:
                if last["x"] is x:
                    found[self.key] = last["stats"]
                else:
                    found[self.key] = LinearStats.empty(self.k, x.device)
                    owners.add(self.key)
            stats = found[self.key]
            if self.key in owners:
                stats.add(x)
            last["x"], last["stats"] = x, stats
            return self.inner(x)

    def builder(w, b, block, role):
        inner = FloatLinear(w.to(dtype), None if b is None else b.to(dtype))
        return Observed(inner, (block, role), w.shape[1])

    model = build_model(weights, builder, dtype, head=builder if head else None)
    n = len(ids) // chunk
    tokens = torch.tensor(ids[: n * chunk], dtype=torch.int64).view(n, chunk)
    if bos is not None:
        tokens[:, 0] = bos
    tokens = tokens.to(weights.device)
    with torch.inference_mode():
        for c in range(n):
            last["x"] = None
            model(tokens[c][None])
    del model
    return found, time.perf_counter() - t0
