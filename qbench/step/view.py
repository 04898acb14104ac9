"""Model-step rows read (torch-free): the measured step beside the layer view's prediction, the speed-ups over a
baseline (baseline time / scheme time, > 1: faster), the context sweep, the pick per (M, context), and the
declared tables of each.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

from qbench import judge
from qbench.judge import decision_method, methods_present
from qbench.render import DATA_FORMATS, Column, narrow, prose
from qbench.render.columns import DASH, entry, fmt_ratio, shown
from qbench.render.view import View
from qbench.row import FLAG_MEANINGS
from qbench.step.row import StepRow
from qbench.timing import registry

_STEP = [m for m in registry.methods().values() if m.job == "step"]
#: The step methods, in table order (the timing registry's ``job = "step"`` methods).
STEP_METHODS: tuple[str, ...] = tuple(m.name for m in sorted(_STEP, key=lambda m: m.order))
#: Short column names of the step methods (each method's ``short``).
SHORT: dict[str, str] = {m.name: m.short or m.name for m in _STEP}
#: The methods a step decision reads, first present wins (the registry's ``fallback_rank``).
DECISION_ORDER: tuple[str, ...] = registry.decision_order("step")
#: A compiled method -> its eager form, read on a baseline that has no compiled form.
_EAGER_TWIN = {m.name: m.twin for m in _STEP if m.compiled == "default" and m.twin}


def _us(value: Optional[float]) -> str:
    if value is None:
        return DASH
    return f"{value / 1000:.3g} ms" if value >= 1000 else f"{value:.3g} µs"


def _baseline_of(rows: Sequence[StepRow], baseline: str, keep: Callable[[StepRow], object] = lambda r: r.status == "ok"
                 ) -> Callable[[StepRow], Optional[StepRow]]:
    """A row -> its baseline row among the ``keep`` rows (same M, context, model, device): the baseline's compiled
    form for a compiled row when present, else the baseline; None without one."""
    base = {(r.scheme, r.m, r.context, r.model, r.device): r for r in rows
            if r.scheme in (baseline, f"{baseline}+compiled") and keep(r)}

    def of(r: StepRow) -> Optional[StepRow]:
        where = (r.m, r.context, r.model, r.device)
        if r.mode == "compiled" and (f"{baseline}+compiled", *where) in base:
            return base[(f"{baseline}+compiled", *where)]
        return base.get((baseline, *where))

    return of


def speedups(rows: Sequence[StepRow], baseline: str = "bf16") -> dict[tuple, dict[str, float]]:
    """``{row.key: {method: baseline step / this step}}`` per method both have; a compiled step against the eager
    baseline's ``twin`` method when that is all it has."""
    base_of = _baseline_of(rows, baseline)
    out: dict[tuple, dict[str, float]] = {}
    for r in rows:
        b = base_of(r)
        if b is None or r.status != "ok":
            continue
        out[r.key] = {m: b.step_us(m) / r.step_us(m) for m in STEP_METHODS if r.step_us(m) and b.step_us(m)}
        for method, eager in _EAGER_TWIN.items():
            if r.mode == "compiled" and b.step_us(method) is None and b.step_us(eager) and r.step_us(method):
                out[r.key][method] = b.step_us(eager) / r.step_us(method)
    return out


#: Flags that put a step's time in doubt, and so any ratio of it: said beside a speed-up, and beside a tie.
DOUBT_FLAGS = ("noisy", "throttled", "cpu-busy")


def speedup_doubts(rows: Sequence[StepRow], baseline: str = "bf16") -> dict[tuple, list[str]]:
    """``{row.key: flag names}`` for the ``ok`` rows with a speed-up (not the baseline's own) that is in doubt, by
    the reading each side of the ratio used (the row's decision method; the baseline's same method, or its eager
    twin): ``noisy`` (that reading's cv), ``throttled`` (an NVML slow-down reason right after that method; the
    row's flag when the file has no reading per method), ``cpu-busy`` (the row's: every CPU method)."""
    base_of, sp, out = _baseline_of(rows, baseline), speedups(rows, baseline), {}
    for r in rows:
        b, method = base_of(r), decision_method(r)
        if r.status != "ok" or method is None or b is None or b is r or sp.get(r.key, {}).get(method) is None:
            continue
        pair = [(r, method), (b, _base_method(b, method))]
        names = ["noisy"] if any(judge.is_noisy(x, m) for x, m in pair) else []
        names += ["throttled"] if any(_throttled(x, m) for x, m in pair) else []
        names += ["cpu-busy"] if any("cpu-busy" in x.flag_names for x, _ in pair) else []
        if names:
            out[r.key] = names
    return out


def _throttled(r: StepRow, method: str) -> bool:
    """Whether NVML gave a slow-down reason right after ``method``'s reading (the row's ``throttled`` flag when
    the row has no reading per method)."""
    reading = r.gpu_state.by_method.get(method) if r.gpu_state is not None else None
    if reading is None or reading.throttle_reasons is None:
        return "throttled" in r.flag_names and not (r.gpu_state and r.gpu_state.by_method)
    return bool(reading.throttle_reasons)


def linear_speedup(rows: Sequence[StepRow], baseline: str = "bf16") -> dict[tuple, float]:
    """``{row.key: baseline Σ linear / this Σ linear}``: the speed-up the layer view predicts."""
    base_of, out = _baseline_of(rows, baseline, lambda r: r.linear), {}
    for r in rows:
        b = base_of(r)
        if b and r.linear and r.linear.get("sum_us") and b.linear.get("sum_us"):
            out[r.key] = b.linear["sum_us"] / r.linear["sum_us"]
    return out


def breakeven(rows: Sequence[StepRow], baseline: str = "bf16") -> dict[tuple[str, int], Optional[int]]:
    """``{(scheme, M): the smallest context where the scheme's step is not faster than the baseline's beyond noise}``
    (None: faster at every context measured). Faster beyond noise: the row's p10-p90 range of its decision method
    lies wholly under the baseline's (its same method, or the eager twin), the rule of
    :func:`qbench.judge.pick_within_noise`'s ties; a 1.01× whose ranges overlap is not faster."""
    sp, base_of = speedups(rows, baseline), _baseline_of(rows, baseline)
    out: dict[tuple[str, int], Optional[int]] = {}
    for r in sorted(rows, key=lambda r: r.context):
        if r.scheme == baseline or r.key not in sp:
            continue
        method = decision_method(r)
        ratio = sp[r.key].get(method) if method else None
        key = (r.scheme, r.m)
        out.setdefault(key, None)
        if ratio is not None and out[key] is None and not (ratio > 1.0 and _apart(r, base_of(r), method)):
            out[key] = r.context
    return out


def _base_method(b: StepRow, method: str) -> str:
    """The baseline row ``b``'s method a row's ``method`` is compared with: the same, or its eager twin when ``b``
    has no reading by it (a compiled step against an eager baseline, as :func:`speedups` pairs them)."""
    return method if b.step_us(method) else _EAGER_TWIN.get(method, method)


def _apart(r: StepRow, b: Optional[StepRow], method: str) -> bool:
    """Whether ``r``'s ``method`` reading is faster than its baseline ``b``'s beyond noise (:func:`judge.verdict`)."""
    mine = r.latency_us.get(method)
    theirs = b.latency_us.get(_base_method(b, method)) if b else None
    return bool(mine and theirs) and judge.verdict(theirs, mine) == "faster"


def table_records(rows: Sequence[StepRow], baseline: str = "bf16") -> list[dict]:
    """One record per row keyed by :func:`table_view`'s column keys, numbers raw; ``_doubt``: :func:`doubtful`."""
    sp, lsp = speedups(rows, baseline), linear_speedup(rows, baseline)
    out = []
    for r, doubt in zip(rows, doubtful(rows, baseline)):
        method, err = decision_method(r), r.error or {}
        out.append({
            "scheme": r.scheme, "m": r.m, "context": r.context, "status": r.status,
            "blocks": f"{r.blocks_built}/{r.blocks}" if r.blocks_built is not None else str(r.blocks),
            **{_key(m): r.step_us(m) for m in STEP_METHODS},
            "tokens_per_s": r.tokens_per_s.get(method) if method else None, "linear": (r.linear or {}).get("sum_us"),
            "rest": 100 * r.remainder_share[method] if method in r.remainder_share else None,
            "floor": 100 * r.floor_fraction[method] if method in r.floor_fraction else None,
            **_attention(r),
            "speedup": sp.get(r.key, {}).get(method) if method else None, "speedup_linear": lsp.get(r.key),
            "err": err.get("rel_fro"), "kl": err.get("kl_div"), "top1": err.get("top1_agree"),
            "flags": ", ".join(r.flag_names), "reason": r.reason, "_doubt": doubt})
    return out


def _attention(r: StepRow) -> dict:
    """The attention timed alone (µs per step, its HBM floor %) and its cache (dtype, kernel), or None."""
    a, kv = r.attention or {}, r.kv_cache or {}
    return {"attention": a.get("us"), "attention_floor": 100 * a["floor_fraction"] if a.get("floor_fraction") else None,
            "kv": f"{kv.get('dtype', '')} {a.get('kernel', '')}".strip() or None}


def _key(method: str) -> str:
    """A step method's column key: the first word of its short name (``graph``, ``compiled``, ``loop``)."""
    return SHORT[method].split()[0]


def marked_ratio(value: Optional[float], doubt) -> str:
    """A speed-up cell: the ratio, ending in ``*`` when ``doubt`` (its :func:`speedup_doubts`) is set."""
    return fmt_ratio(value) + ("*" if value is not None and doubt else "")


def _cell(key: str, template: str, blank: int = -1) -> Callable[[dict], str]:
    """A record's cell: ``template`` of its value, ``—`` where its doubt mark ``blank`` is set."""
    return lambda r: DASH if blank >= 0 and r["_doubt"][blank] else shown(r[key], template)


def table_view(rows: Sequence[StepRow], baseline: str = "bf16") -> View:
    """The step table over :func:`table_records`: the step per method (µs, ms from 1000), tokens/s, Σ linear, the
    remainder's share, the HBM floor, the attention, the speed-up over ``baseline`` measured and as Σ linear
    predicts it, the logits error."""
    b, methods = baseline, [_key(m) for m in methods_present(rows) if m in SHORT]
    def col(key: str, header: str, cell=None, numeric: bool = True) -> Column:
        return Column(key, header, lambda r: r[key], numeric=numeric, cell_override=cell)  # default cell: text or —
    catalogue = [col("scheme", "scheme", numeric=False), col("m", "M"), col("context", "context"),
                 col("status", "status", numeric=False), col("blocks", "blocks"),
                 *[col(_key(m), f"{SHORT[m]} µs", lambda r, k=_key(m): _us(r[k])) for m in STEP_METHODS],
                 col("tokens_per_s", "tok/s", _cell("tokens_per_s", "{:.0f}")),
                 col("linear", "Σ linear µs", lambda r: _us(r["linear"])),
                 col("rest", "rest %", _cell("rest", "{:.0f} %", 0)),
                 col("floor", "floor %", _cell("floor", "{:.0f} %")),
                 col("attention", "attn µs", lambda r: _us(r["attention"])),
                 col("attention_floor", "attn floor %", _cell("attention_floor", "{:.0f} %")),
                 col("kv", "kv", numeric=False),
                 col("speedup", f"×{b}", lambda r: marked_ratio(r["speedup"], r["_doubt"][2])),
                 col("speedup_linear", f"×{b} (Σ lin)", _cell("speedup_linear", "{:.2f}×", 1)),
                 col("err", "logits err", _cell("err", "{:.2g}")), col("kl", "KL", _cell("kl", "{:.2g}")),
                 col("top1", "top-1", _cell("top1", "{:.2g}")), col("flags", "flags", numeric=False),
                 col("reason", "reason", numeric=False)]
    split = any(r.attention for r in rows)  # files with the attention timed alone: its columns too
    attn = ["attention", "attention_floor", "kv"] if split else []
    wide = ["scheme", "m", "context", "status", "blocks", *methods, "tokens_per_s", "linear", "rest", "floor", *attn,
            "speedup", "speedup_linear", "err", "kl", "top1", "flags"]
    return View("model-step", catalogue, narrow=["scheme", "m", "context", *methods, "rest", *attn[:1], "speedup",
                                                  "speedup_linear", "err"],
                wide=wide, data=[*wide, "reason"],
                short={"context": "ctx", "rest": "rest", "speedup_linear": f"×{b} Σ", "err": "err",
                       **{_key(m): SHORT[m] for m in STEP_METHODS}})


def table_notes(rows: Sequence[StepRow], records: Sequence[dict], wide: bool = False) -> list[str]:
    """The lines under a step table: why rows did not run, the flags (not ``wide``), the marks' legend and whether
    the compiled schemes were compiled with different Inductor tuning (:func:`inductor_note`)."""
    notes = [f"{r.scheme} M={r.m} context={r.context}: {r.status}: {r.reason}" for r in rows if r.status != "ok"]
    return (notes + ([] if wide else flag_notes(rows)) + doubt_legend([r["_doubt"] for r in records])
            + inductor_note(rows))


def _builds_tuning(label: str) -> bool:
    """Whether building the scheme ``label`` names (``name[options]``, ``+compiled``) switches Inductor's
    coordinate-descent tuning on (:attr:`qbench.schemes.scheme.Scheme.inductor_tuning`); False for a name this
    registry does not know."""
    from qbench import schemes

    try:
        return schemes.get(label.split("[")[0].removesuffix("+compiled")).inductor_tuning
    except (schemes.UnknownSchemeError, schemes.PluginError):
        return False


def inductor_sides(rows: Sequence[StepRow]) -> tuple[dict[bool, set[str]], set[str]]:
    """The ok compiled schemes of ``rows`` by Inductor's coordinate-descent tuning, ``{tuned: schemes}``, and the
    schemes whose setting was inferred: a row without the ``compile.inductor`` record was made before every
    compiled worker got torchao's settings (:func:`qbench.compile_info.tune_like_torchao`), so it had the tuning
    only where its scheme's build (a recipe's: any part's) switched it on. A row with no compile record compiled
    nothing for the step (no compiled step method ran: on a CPU, or ``methods`` without one) and is left out."""
    sides: dict[bool, set[str]] = {}
    inferred: set[str] = set()
    for r in rows:
        if r.status != "ok" or r.mode != "compiled" or not r.compile:
            continue
        setting = ((r.compile or {}).get("inductor") or {}).get("coordinate_descent_tuning")
        if setting is None:
            parts = [r.base_scheme, *(item["scheme"] for item in (r.recipe or {}).get("linears", []))]
            setting = any(_builds_tuning(p) for p in parts)
            inferred.add(r.scheme)
        sides.setdefault(bool(setting), set()).add(r.scheme)
    return sides, inferred


def inductor_note(rows: Sequence[StepRow]) -> list[str]:
    """One line when compiled rows were compiled with and without coordinate-descent tuning, naming each side
    and the schemes whose setting was inferred (:func:`inductor_sides`); none otherwise."""
    sides, inferred = inductor_sides(rows)
    if len(sides) < 2:
        return []
    return [f"compiled with Inductor's coordinate-descent tuning: {', '.join(sorted(sides[True]))} (their torchao "
            f"configs switch it on); without: {', '.join(sorted(sides[False]))}: a compiled speed-up over the latter "
            "includes that tuning (docs/step.md measures it)"
            + (f"; no record in the file for {', '.join(sorted(inferred))} (made before every compiled worker got "
               "torchao's settings, 2026-12-06): read from what each scheme's build switches on" if inferred else "")]


def step_table(rows: Sequence[StepRow], fmt: str = "simple", wide: bool = False) -> str:
    """The step table of ``rows`` in ``fmt`` (speed-ups over bf16), its notes under it."""
    records = table_records(rows)
    text = table_view(rows).render(records, fmt, wide)
    notes = table_notes(rows, records, not narrow(fmt, wide)) if fmt not in DATA_FORMATS else []
    return text + ("\n\n" + "\n".join(prose(fmt, wide)(n) for n in notes) if notes else "")


#: A remainder share below this (Σ linear > 1.02 × step, the ``linear-above-step`` rule): not a reading.
LINEAR_ABOVE_STEP = -0.02


def doubtful(rows: Sequence[StepRow], baseline: str = "bf16") -> list[tuple[bool, bool, tuple[str, ...]]]:
    """Per row, ``(above, pair_above, doubts)``: Σ linear exceeds the row's decision step (:data:`LINEAR_ABOVE_STEP`;
    its remainder shown ``—``), exceeds the row's or its baseline's (so does the predicted speed-up), and the
    :func:`speedup_doubts` of the pair (noisy, throttled, cpu-busy; its speed-up marked ``*``)."""
    base_of, doubts = _baseline_of(rows, baseline), speedup_doubts(rows, baseline)

    def above(r: Optional[StepRow]) -> bool:
        share = r.remainder_share.get(decision_method(r) or "") if r is not None else None
        return share is not None and share < LINEAR_ABOVE_STEP

    return [(above(r), above(r) or above(base_of(r)), tuple(doubts.get(r.key, ()))) for r in rows]


#: How the legend names each of :data:`DOUBT_FLAGS`.
DOUBT_WORDS = {"noisy": f"noisy (cv over {judge.NOISY_CV:.0%})", "throttled": "throttled (the GPU limited its clocks)",
               "cpu-busy": "timed beside other CPU work (cpu-busy)"}


def doubt_legend(doubts: Sequence[tuple[bool, bool, bool]]) -> list[str]:
    """The line that says what the ``—`` and ``*`` marks of :func:`doubtful` mean (none without marks)."""
    said = (["rest and ×Σ '—': Σ linear exceeds the step (rest: this row's; ×Σ: this row's or its baseline's; "
             "linear-above-step), so neither is a reading"] if any(p for _, p, _ in doubts) else [])
    names = [DOUBT_WORDS[f] for f in DOUBT_FLAGS if any(f in d for _, _, d in doubts)]
    said += ([f"×baseline '*': this row's or its baseline's step is {' or '.join(names)}: a ratio of medians that "
              "may not hold"] if names else [])
    return ["; ".join(said)] if said else []


def flag_notes(rows: Sequence[StepRow]) -> list[str]:
    """One line per (scheme, flag name), naming where it was raised: ``x+compiled: throttled (M=1 ctx=4096)``."""
    seen: dict[tuple[str, str], list[str]] = {}
    for r in rows:
        for name in dict.fromkeys(r.flag_names):
            seen.setdefault((r.scheme, name), []).append(f"M={r.m} ctx={r.context}")
    return [f"{scheme}: {name} ({', '.join(where)})" for (scheme, name), where in seen.items()]


def describe(doc) -> list[str]:
    """The lines above a step table: the model, its weights, what each step method includes, the columns."""
    rows = doc.rows
    model = (doc.scenario.model_extra or {}).get("model") or {}
    lines = [f"model step: {rows[0].title if rows else model.get('name')}; "
             f"weights: {rows[0].weight_source if rows else ''}"]
    for m in methods_present(rows):
        meta = registry.METHODS.get(m)
        if meta is not None:
            lines.append(f"  {SHORT[m]}: {meta.includes}")
    if any(r.linear for r in rows):
        lines.append("  Σ linear: the per-layer stream times of the same linear layers, summed over one step (the "
                     "layer view); rest % = (step - Σ linear) / step: attention over the KV cache, norms, RoPE, "
                     "embedding, LM head argmax, launch gaps")
    else:
        lines.append("  Σ linear, rest % and the speed-up Σ linear predicts: not measured ([model] linear_sum = false)")
    lines.append("  err: relative Frobenius error of the logits (the final hidden state without an LM head) against "
                 "the FP32 step on the same weights")
    return lines


def logits_error(row: StepRow) -> Optional[float]:
    """The row's ``error.rel_fro`` against the FP32 step."""
    return (row.error or {}).get("rel_fro")


def model_records(rows: Sequence[StepRow], baseline: str = "bf16") -> list[dict]:
    """One record per ``ok`` row, by M, context and file order: the step by its decision ``method`` (µs), tokens/s,
    Σ linear (µs), the remainder's share, the attention split, the speed-up over ``baseline`` per method and as Σ
    linear predicts it."""
    sp, lsp = speedups(rows, baseline), linear_speedup(rows, baseline)
    order = {r.key: i for i, r in enumerate(rows)}
    out = []
    for r in sorted((r for r in rows if r.status == "ok"), key=lambda r: (r.m, r.context, order[r.key])):
        method = decision_method(r)
        out.append({"scheme": r.scheme, "m": r.m, "context": r.context, "method": method,
                    "step_us": r.step_us(method) if method else None,
                    "tokens_per_s": r.tokens_per_s.get(method) if method else None,
                    "linear_us": (r.linear or {}).get("sum_us"),
                    "rest_share": r.remainder_share.get(method) if method else None,
                    **(_split(r, method) if r.attention else {}),  # older files' records as they were
                    "speedup": dict(sp.get(r.key, {})), "linear_speedup": lsp.get(r.key),
                    "reasons": {m: why.text for m, why in r.latency_reasons.items()}})
    return out


def _split(r: StepRow, method: Optional[str]) -> dict:
    """The step by ``method`` (µs) three ways: Σ linear, the attention timed alone (and its floor share), the other
    (the row's ``other_us``: none where the attention read longer than the step, ``attention-above-step``)."""
    a = r.attention or {}
    other = r.other_us.get(method) if method else None
    return {"attention_us": a.get("us"), "attention_floor": a.get("floor_fraction"), "other_us": other}


def sweep(rows: Sequence[StepRow], baseline: str = "bf16") -> list[dict]:
    """The context sweep per (scheme, M), the baseline's forms left out: ``contexts``, ``breakeven``
    (:func:`breakeven`) and ``compared`` (False: no context has a speed-up)."""
    be, sp = breakeven(rows, baseline), speedups(rows, baseline)
    out = []
    for scheme, m in dict.fromkeys((r.scheme, r.m) for r in rows if r.status == "ok"):
        if scheme in (baseline, f"{baseline}+compiled"):
            continue
        mine = sorted((r for r in rows if r.scheme == scheme and r.m == m and r.status == "ok"),
                      key=lambda r: r.context)
        compared = any(decision_method(r) and sp.get(r.key, {}).get(decision_method(r)) for r in mine)
        out.append({"scheme": scheme, "m": m, "contexts": [r.context for r in mine],
                    "breakeven": be.get((scheme, m)), "compared": compared})
    return out


def sweep_line(rec: dict, baseline: str = "bf16") -> str:
    """One line of :func:`sweep`: where the scheme stops beating ``baseline``."""
    where = f"{rec['scheme']} M={rec['m']}"
    contexts = ", ".join(str(c) for c in rec["contexts"])
    if not rec["compared"]:
        return f"- {where}: no step time to compare with {baseline} (contexts {contexts})"
    if rec["breakeven"] is None:
        return f"- {where}: faster than {baseline} at every context measured ({contexts})"
    if rec["breakeven"] == rec["contexts"][0]:
        return f"- {where}: never faster than {baseline} at the contexts measured ({contexts})"
    return (f"- {where}: stops beating {baseline} at context {rec['breakeven']}: faster below it (contexts "
            f"measured: {contexts})")


def flag_legend(names: Sequence[str]) -> str:
    """``[name]: meaning`` for each of ``names`` :data:`qbench.row.FLAG_MEANINGS` knows, once, ``; ``-joined."""
    return "; ".join(f"[{f}]: {FLAG_MEANINGS[f]}" for f in dict.fromkeys(names) if f in FLAG_MEANINGS)


def recommend(rows: Sequence[StepRow], max_rel_err: float = float("inf"), baseline: str = "bf16",
              tie_error: Optional[Callable[[StepRow], Optional[float]]] = None,
              within: Optional[Callable[[StepRow], bool]] = None) -> list[dict]:
    """Per (M, context), in order: the pick among the ``ok`` rows within the budget (logits error ≤ ``max_rel_err``,
    or ``within``), each by its decision method, by :func:`qbench.judge.pick_within_noise` (ties: the smaller
    context's pick, then ``tie_error``, default the logits error, then bytes). A record holds the pick's
    ``method``, ``step_us``, ``tokens_per_s``, ``speedup`` (``doubt``: its :func:`speedup_doubts`), ``rel_fro``,
    ``compared``, ``ties``, ``fastest``, ``within`` / ``timed`` counts, ``untimed``, ``timing_flags``,
    ``pick_flags`` and ``baseline_flags``."""
    sp, base_of, within_budget = speedups(rows, baseline), _baseline_of(rows, baseline), within
    doubts, out, previous = speedup_doubts(rows, baseline), [], {}
    for m, context in sorted({(r.m, r.context) for r in rows}):
        here = [r for r in rows if r.m == m and r.context == context and r.status == "ok"]
        timed = [r for r in here if decision_method(r)]
        within = [r for r in timed if (within_budget(r) if within_budget else
                                       logits_error(r) is not None and logits_error(r) <= max_rel_err)]
        best, _, fastest, group = judge.pick_within_noise(
            within, time=lambda r: r.step_us(decision_method(r)), same=judge.within_noise,
            error=tie_error or logits_error, size=lambda r: (r.bytes or {}).get("total"), name=lambda r: r.scheme,
            previous=previous.get(m))
        if best:  # a context without a pick leaves the last pick to the next context
            previous[m] = best.scheme
        method = decision_method(best) if best else None
        ties = sorted((r for r in group if r is not best), key=lambda r: r.step_us(decision_method(r)))
        out.append({"m": m, "context": context, "pick": best.scheme if best else None, "method": method,
                    "step_us": best.step_us(method) if best else None,
                    "tokens_per_s": best.tokens_per_s.get(method) if best else None,
                    "speedup": sp.get(best.key, {}).get(method) if best else None,
                    "doubt": doubts.get(best.key, []) if best else [],
                    "rel_fro": logits_error(best) if best else None,
                    "compared": (best.error or {}).get("compared") if best else None,
                    "ties": [r.scheme for r in ties], "fastest": fastest.scheme if fastest else None,
                    "timing_flags": {r.scheme: doubt for r in group
                                     if (doubt := list(dict.fromkeys(f for f in r.flag_names if f in DOUBT_FLAGS)))},
                    "pick_flags": list(dict.fromkeys(best.flag_names)) if best else [],
                    "baseline_flags": {b.scheme: list(dict.fromkeys(b.flag_names))
                                       for b in [base_of(best) if best else None]
                                       if b is not None and b is not best and b.flag_names},
                    "within": len(within), "timed": len(timed),
                    "untimed": [r.scheme for r in here if not decision_method(r)]})
    return out


def recommend_view(baseline: str = "bf16") -> View:
    """The table of :func:`recommend` records: per M and context the pick and its step."""
    cols = [entry("m", "M", str, True), entry("context", "context", str, True),
            Column("pick", "fastest step within the budget", lambda r: r["pick"] or "none"),
            Column("method", "step method", lambda r: SHORT.get(r["method"], DASH) if r["method"] else DASH),
            entry("step_us", "step µs", "us"), entry("tokens_per_s", "tokens/s", ".0f"),
            entry("speedup", f"×{baseline}", "ratio",
                  cell_override=lambda r: marked_ratio(r["speedup"], r.get("doubt"))),
            entry("rel_fro", "logits err", ".3g"),
            Column("within", "within budget", lambda r: f"{r['within']} of {r['timed']}", numeric=True)]
    return View("model-step recommend", cols,
                short={"context": "ctx", "pick": "pick", "method": "method", "within": "within"})


def model_view(records: Sequence[dict], baseline: str = "bf16", max_rel_err: Optional[float] = None) -> View:
    """The table of ``qbench model`` on step files over :func:`model_records` records (with ``rel_fro``,
    ``over_budget``, ``_doubt``); the speed-up by the row's method (narrow) or per method (wide)."""
    b = baseline
    methods = [m for m in STEP_METHODS if any(m in r["speedup"] for r in records)]

    def speedup(r: dict, m: Optional[str]) -> str:
        return marked_ratio(r["speedup"].get(m) if m else None, m == r["method"] and r["_doubt"][2])

    cols = [entry("m", "M", str, True), entry("context", "context", str, True), entry("scheme", "scheme"),
            Column("method", "step method", lambda r: SHORT.get(r["method"], r["method"] or DASH)),
            entry("step_us", "step µs (measured)", "us"),
            entry("tokens_per_s", "tokens/s", ".0f"), entry("linear_us", "Σ linear µs", "us"),
            Column("rest_pct", "rest", lambda r: None if r["rest_share"] is None or r["_doubt"][0]
                   else 100 * r["rest_share"], "pct"),
            Column("attention_us", "attention µs", lambda r: r.get("attention_us"), "us"),
            Column("attention_floor", "attn floor", lambda r: None if r.get("attention_floor") is None
                   else 100 * r["attention_floor"], "pct"),
            Column("other_us", "other µs", lambda r: r.get("other_us"), "us"),
            Column("speedup", f"×{b}", lambda r: r["speedup"].get(r["method"]) if r["method"] else None, numeric=True,
                   cell_override=lambda r: speedup(r, r["method"])),
            *[Column(f"speedup_{m}", f"×{b} {SHORT[m]}", lambda r, m=m: r["speedup"].get(m), numeric=True,
                     cell_override=lambda r, m=m: speedup(r, m)) for m in methods],
            Column("linear_speedup", f"×{b} Σ linear", lambda r: None if r["_doubt"][1] else r["linear_speedup"],
                   "ratio"),
            entry("rel_fro", "logits err", ".3g"),
            Column("budget", f"≤ {max_rel_err or 0:g}", lambda r: "over" if r["over_budget"] else "ok")]
    budget = ["budget"] if max_rel_err is not None else []
    attn = any(r.get("attention_us") is not None for r in records)
    split = ["attention_us", "attention_floor", "other_us"] if attn else []
    wide = ["m", "context", "scheme", "method", "step_us", "tokens_per_s", "linear_us", "rest_pct", *split,
            *(f"speedup_{m}" for m in methods), "linear_speedup", "rel_fro", *budget]
    return View("model-step", cols, ["m", "context", "scheme", "method", "step_us", "rest_pct", *split[:2], "speedup",
                                     "linear_speedup", "rel_fro", *budget], wide,
                short={"context": "ctx", "method": "method", "step_us": "step µs", "linear_speedup": f"×{b} Σ",
                       "rel_fro": "err", "attention_us": "attn µs"})


def pick_notes(rec: Sequence[dict], rows: Sequence[StepRow], error: str = "the lower logits error") -> list[str]:
    """The lines under a table of :func:`recommend` records: ties and the rule among them (``error`` names the
    tie-break), flags of the picks and baselines, schemes not measured or not timed."""
    lines, tied, timing = [], [], []
    for r in rec:
        if not r["ties"]:
            continue
        flags = r["timing_flags"]
        timing += [f for s in [r["pick"], *r["ties"]] for f in flags.get(s, [])]
        listed = ", ".join(f"{s}{' (fastest median)' if s == r['fastest'] else ''}"
                           f"{' [' + ', '.join(flags[s]) + ']' if s in flags else ''}" for s in [r["pick"], *r["ties"]])
        tied.append(f"M={r['m']} ctx={r['context']}: {r['pick']} picked from {listed}")
    if tied:
        lines.append(f"tied with the fastest within noise (p10–p90 overlap); among them the pick is the smaller "
                     f"context's, else {error}, then fewer bytes: " + "; ".join(tied)
                     + (f"; {flag_legend(timing)}" if timing else ""))
    flagged, seen = [], []
    for r in rec:
        if not r["pick"] or not (r["pick_flags"] or r["baseline_flags"]):
            continue
        said = [f"{r['pick']} [{', '.join(r['pick_flags'])}]"] if r["pick_flags"] else []
        said += [f"{s} (baseline) [{', '.join(f)}]" for s, f in r["baseline_flags"].items()]
        flagged.append(f"M={r['m']} ctx={r['context']}: " + ", ".join(said))
        seen += [*r["pick_flags"], *(x for fs in r["baseline_flags"].values() for x in fs)]
    if flagged:
        legend = flag_legend(seen)
        lines.append("flags on the picks and on the baselines their speed-up divides by (the rows' own flag text in "
                     "the JSON has the figures): " + "; ".join(flagged) + (f"; {legend}" if legend else ""))
    lines += doubt_legend([(False, False, tuple(r.get("doubt", ()))) for r in rec if r["speedup"] is not None])
    failed: dict[str, str] = {}
    for r in rows:
        if r.status != "ok":
            failed.setdefault(r.scheme, f"{r.status}: {r.reason or 'no reason recorded'}")
    if failed:
        lines.append("not measured (no ok row, not considered): "
                     + "; ".join(f"{s}: {why[:160]}" for s, why in failed.items()))
    untimed = sorted({s for r in rec for s in r["untimed"]})
    if untimed:
        lines.append(f"not timed (no step time, not considered): {', '.join(untimed)}")
    return lines + inductor_note(rows)
