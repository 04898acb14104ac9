"""Model-step rows read (torch-free): the measured step beside the layer view's prediction, the speed-ups over a
baseline (baseline time / scheme time, > 1: faster), the context sweep, the pick per (M, context), their tables.
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
#: A step method's step-table column key: the first word of its short name (``graph``, ``compiled``, ``loop``).
_KEY = {name: short.split()[0] for name, short in SHORT.items()}
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
    """A row -> its baseline row among the ``keep`` rows (same M, context, model, device; compiled form first)."""
    base = {r.key: r for r in rows if r.scheme in (baseline, f"{baseline}+compiled") and keep(r)}

    def of(r: StepRow) -> Optional[StepRow]:
        where = (r.m, r.context, r.model, r.device)
        compiled = base.get((f"{baseline}+compiled", *where)) if r.mode == "compiled" else None
        return compiled or base.get((baseline, *where))

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


#: Flags that put a step's time in doubt, and so any ratio of it (said beside a speed-up and a tie): legend words.
DOUBT_WORDS = {"noisy": f"noisy (cv over {judge.NOISY_CV:.0%})", "throttled": "throttled (the GPU limited its clocks)",
               "cpu-busy": "timed beside other CPU work (cpu-busy)"}
DOUBT_FLAGS = tuple(DOUBT_WORDS)


def speedup_doubts(rows: Sequence[StepRow], baseline: str = "bf16") -> dict[tuple, list[str]]:
    """``{row.key: flag names}`` for the ``ok`` rows whose speed-up (not the baseline's own) is in doubt by either
    side's reading of it: ``noisy`` (its cv), ``throttled`` (:func:`_throttled`), ``cpu-busy`` (the row's flag)."""
    base_of, sp, out = _baseline_of(rows, baseline), speedups(rows, baseline), {}
    tests = {"noisy": judge.is_noisy, "throttled": _throttled, "cpu-busy": lambda x, _: "cpu-busy" in x.flag_names}
    for r in rows:
        b, method = base_of(r), decision_method(r)
        if b is r or sp.get(r.key, {}).get(method) is None:  # no speed-up (sp: ok rows with a baseline)
            continue
        pair = [(r, method), (b, _base_method(b, method))]
        if names := [f for f, test in tests.items() if any(test(x, m) for x, m in pair)]:
            out[r.key] = names
    return out


def _throttled(r: StepRow, method: str) -> bool:
    """Whether NVML gave a slow-down reason right after ``method``'s reading (else the row's ``throttled`` flag)."""
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
    (None: faster at every context measured); beyond noise: :func:`qbench.judge.verdict` on the decision method."""
    sp, base_of = speedups(rows, baseline), _baseline_of(rows, baseline)
    out: dict[tuple[str, int], Optional[int]] = {}
    for r in sorted(rows, key=lambda r: r.context):
        if r.scheme == baseline or r.key not in sp:
            continue
        ratio, key = sp[r.key].get(decision_method(r)), (r.scheme, r.m)
        if out.setdefault(key, None) is None and ratio is not None and not (ratio > 1 and _apart(r, base_of(r))):
            out[key] = r.context
    return out


def _base_method(b: StepRow, method: str) -> str:
    """The baseline ``b``'s method a row's ``method`` is compared with: the same, else its eager twin."""
    return method if b.step_us(method) else _EAGER_TWIN.get(method, method)


def _apart(r: StepRow, b: StepRow) -> bool:
    """Whether ``r``'s decision-method reading is faster than the baseline ``b``'s beyond noise (both have one)."""
    method = decision_method(r)
    return judge.verdict(b.latency_us[_base_method(b, method)], r.latency_us[method]) == "faster"


def table_records(rows: Sequence[StepRow], baseline: str = "bf16") -> list[dict]:
    """One record per row keyed by :func:`table_view`'s column keys, numbers raw; ``_doubt``: :func:`doubtful`."""
    sp, lsp = speedups(rows, baseline), linear_speedup(rows, baseline)
    out = []
    for r, doubt in zip(rows, doubtful(rows, baseline)):
        method, err, a, kv = decision_method(r), r.error or {}, r.attention or {}, r.kv_cache or {}
        out.append({
            "scheme": r.scheme, "m": r.m, "context": r.context, "status": r.status,
            "blocks": f"{r.blocks_built}/{r.blocks}" if r.blocks_built is not None else str(r.blocks),
            **{_KEY[m]: r.step_us(m) for m in STEP_METHODS},
            "tokens_per_s": r.tokens_per_s.get(method), "linear": (r.linear or {}).get("sum_us"),
            "rest": 100 * r.remainder_share[method] if method in r.remainder_share else None,
            "floor": 100 * r.floor_fraction[method] if method in r.floor_fraction else None,
            "attention": a.get("us"), "attention_floor": 100 * a["floor_fraction"] if a.get("floor_fraction") else None,
            "kv": f"{kv.get('dtype', '')} {a.get('kernel', '')}".strip() or None,
            "speedup": sp.get(r.key, {}).get(method), "speedup_linear": lsp.get(r.key),
            "err": err.get("rel_fro"), "kl": err.get("kl_div"), "top1": err.get("top1_agree"),
            "flags": ", ".join(r.flag_names), "reason": r.reason, "_doubt": doubt})
    return out


def marked_ratio(value: Optional[float], doubt) -> str:
    """A speed-up cell: the ratio, ending in ``*`` when ``doubt`` (its :func:`speedup_doubts`) is set."""
    return fmt_ratio(value) + ("*" if value is not None and doubt else "")


def table_view(rows: Sequence[StepRow], baseline: str = "bf16") -> View:
    """The step table over :func:`table_records`: the step per method (µs, ms from 1000), tokens/s, Σ linear, rest,
    HBM floor, attention, the speed-up over ``baseline`` measured and as Σ linear predicts it, the logits error."""
    b, methods = baseline, [_KEY[m] for m in methods_present(rows) if m in SHORT]

    def col(key: str, header: str, show=None, blank: int = -1, numeric: bool = True) -> Column:
        """``show`` (a function or :func:`shown` template) of the value; ``—`` where doubt mark ``blank`` is set."""
        fmt = show if callable(show) else lambda v: shown(v, show)
        cell = (lambda r: DASH if blank >= 0 and r["_doubt"][blank] else fmt(r[key])) if show else None
        return Column(key, header, lambda r: r[key], numeric=numeric, cell_override=cell)

    catalogue = [col("scheme", "scheme", numeric=False), col("m", "M"), col("context", "context"),
                 col("status", "status", numeric=False), col("blocks", "blocks"),
                 *[col(_KEY[m], f"{SHORT[m]} µs", _us) for m in STEP_METHODS],
                 col("tokens_per_s", "tok/s", "{:.0f}"), col("linear", "Σ linear µs", _us),
                 col("rest", "rest %", "{:.0f} %", 0), col("floor", "floor %", "{:.0f} %"),
                 col("attention", "attn µs", _us), col("attention_floor", "attn floor %", "{:.0f} %"),
                 col("kv", "kv", numeric=False),
                 Column("speedup", f"×{b}", lambda r: r["speedup"], numeric=True,
                        cell_override=lambda r: marked_ratio(r["speedup"], r["_doubt"][2])),
                 col("speedup_linear", f"×{b} (Σ lin)", "{:.2f}×", 1), col("err", "logits err", "{:.2g}"),
                 col("kl", "KL", "{:.2g}"), col("top1", "top-1", "{:.2g}"), col("flags", "flags", numeric=False),
                 col("reason", "reason", numeric=False)]
    attn = ["attention", "attention_floor", "kv"] if any(r.attention for r in rows) else []
    wide = ["scheme", "m", "context", "status", "blocks", *methods, "tokens_per_s", "linear", "rest", "floor", *attn,
            "speedup", "speedup_linear", "err", "kl", "top1", "flags"]
    return View("model-step", catalogue, narrow=["scheme", "m", "context", *methods, "rest", *attn[:1], "speedup",
                                                  "speedup_linear", "err"],
                wide=wide, data=[*wide, "reason"],
                short={"context": "ctx", "rest": "rest", "speedup_linear": f"×{b} Σ", "err": "err",
                       **{_KEY[m]: SHORT[m] for m in STEP_METHODS}})


def table_notes(rows: Sequence[StepRow], records: Sequence[dict], wide: bool = False) -> list[str]:
    """The lines under a step table: why rows did not run, the flags (not ``wide``), the marks' legend and whether
    the compiled schemes were compiled with different Inductor tuning (:func:`inductor_note`)."""
    notes = [f"{r.scheme} M={r.m} context={r.context}: {r.status}: {r.reason}" for r in rows if r.status != "ok"]
    return (notes + ([] if wide else flag_notes(rows)) + doubt_legend([r["_doubt"] for r in records])
            + inductor_note(rows))


def _builds_tuning(label: str) -> bool:
    """Whether building the scheme ``label`` names switches Inductor's coordinate-descent tuning on (False: unknown)."""
    from qbench import schemes
    try:
        return schemes.get(label.split("[")[0].removesuffix("+compiled")).inductor_tuning
    except (schemes.UnknownSchemeError, schemes.PluginError):
        return False


def inductor_sides(rows: Sequence[StepRow]) -> tuple[dict[bool, set[str]], set[str]]:
    """``{tuned: schemes}`` of the ok rows that compiled a step, by Inductor's coordinate-descent tuning, and the
    schemes whose setting is inferred from their build (a recipe's: any part's), lacking ``compile.inductor``."""
    sides: dict[bool, set[str]] = {}
    inferred: set[str] = set()
    for r in rows:
        if r.status != "ok" or r.mode != "compiled" or not r.compile:
            continue
        setting = (r.compile.get("inductor") or {}).get("coordinate_descent_tuning")
        if setting is None:
            parts = [r.base_scheme, *(item["scheme"] for item in (r.recipe or {}).get("linears", []))]
            setting = any(_builds_tuning(p) for p in parts)
            inferred.add(r.scheme)
        sides.setdefault(bool(setting), set()).add(r.scheme)
    return sides, inferred


def inductor_note(rows: Sequence[StepRow]) -> list[str]:
    """One line when compiled rows were compiled with and without coordinate-descent tuning (:func:`inductor_sides`)."""
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
    """Per row, ``(above, pair_above, doubts)``: Σ linear exceeds its step (:data:`LINEAR_ABOVE_STEP`; rest ``—``),
    its or its baseline's (×Σ ``—``), and its :func:`speedup_doubts` (speed-up marked ``*``)."""
    base_of, doubts = _baseline_of(rows, baseline), speedup_doubts(rows, baseline)

    def above(r: Optional[StepRow]) -> bool:
        share = r.remainder_share.get(decision_method(r)) if r is not None else None
        return share is not None and share < LINEAR_ABOVE_STEP

    return [(above(r), above(r) or above(base_of(r)), tuple(doubts.get(r.key, ()))) for r in rows]


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
        for name in r.flag_names:
            seen.setdefault((r.scheme, name), []).append(f"M={r.m} ctx={r.context}")
    return [f"{scheme}: {name} ({', '.join(where)})" for (scheme, name), where in seen.items()]


def describe(doc) -> list[str]:
    """The lines above a step table: the model, its weights, what each step method includes, the columns."""
    rows = doc.rows
    model = (doc.scenario.model_extra or {}).get("model") or {}
    linear = ("  Σ linear: the per-layer stream times of the same linear layers, summed over one step (the layer "
              "view); rest % = (step - Σ linear) / step: attention over the KV cache, norms, RoPE, embedding, LM head "
              "argmax, launch gaps" if any(r.linear for r in rows) else
              "  Σ linear, rest % and the speed-up Σ linear predicts: not measured ([model] linear_sum = false)")
    return [f"model step: {rows[0].title if rows else model.get('name')}; "
            f"weights: {rows[0].weight_source if rows else ''}",
            *(f"  {SHORT[m]}: {registry.METHODS[m].includes}" for m in methods_present(rows) if m in registry.METHODS),
            linear, *kv_line(rows), *error_lines(rows)]


#: What the error compares, by a row's ``lm_head`` (:func:`qbench.step.measure.step_error`'s ``compared``).
_COMPARED = {"float": "the logits, after the LM head in the activation dtype",
             "scheme": "the logits, after the LM head quantized by each scheme (its damage included)",
             "none": "the final hidden state, after the last norm: the step has no LM head (model.lm_head = false)"}


def error_lines(rows: Sequence[StepRow]) -> list[str]:
    """The lines saying what the ``err`` column compares, as the rows' ``lm_head`` says: the logits (the LM head float
    or quantized) or, a step without an LM head, the final hidden state; and for a headless step, that the method
    lines' LM head and argmax are not in it. The step measures the error on what it ends with
    (:meth:`qbench.step.measure` ``_error``)."""
    heads = list(dict.fromkeys(r.lm_head for r in rows))
    said = "; ".join(_COMPARED[h] + (f" ({', '.join(r.scheme for r in rows if r.lm_head == h)})" if len(heads) > 1
                                     else "") for h in heads) or "the logits"
    return ([f"  err: relative Frobenius error of {said}, against the FP32 step on the same weights"]
            + (["  no LM head: the step ends at the final norm; the LM head and argmax the methods name are not timed"]
               if heads == ["none"] else []))


def kv_line(rows: Sequence[StepRow]) -> list[str]:
    """The KV cache's dtype (its scale rule) and the attention kernel that read it, where the rows record them."""
    kv = {c["dtype"] + (f" ({c['scale']})" if c.get("scale") else "") for r in rows if (c := r.kv_cache)}
    attn = {f"{a['kernel']}, the cache read {a['kv_read']}" if a.get("kv_read") else a["kernel"]
            for r in rows if (a := r.attention) and a.get("kernel")}
    return [f"  KV cache: {'; '.join(sorted(kv))}" + (f"; attention: {'; '.join(sorted(attn))}" if attn else "")
            ] if kv else []


def repeated(paths: Sequence[str], docs: Sequence) -> Optional[tuple[str, StepRow, str]]:
    """The first step row, in file order, whose (scheme, M, context, model, device) an earlier file holds too:
    ``(path, row, earlier path)``; None when every row is in one file (a reader that adds rows refuses runs twice)."""
    seen: dict[tuple, str] = {}
    for path, doc in zip(paths, docs):
        for r in doc.rows if doc.job == "step" else []:
            if (earlier := seen.setdefault(r.key, path)) != path:
                return path, r, earlier
    return None


def logits_error(row: StepRow) -> Optional[float]:
    """The row's ``error.rel_fro`` against the FP32 step."""
    return (row.error or {}).get("rel_fro")


def _rest(other_us: Optional[float]) -> Optional[float]:
    """A row's ``other_us`` as shown: None when negative (a file written before ``split-above-step`` left it out)."""
    return other_us if other_us is None or other_us >= 0 else None


def model_records(rows: Sequence[StepRow], baseline: str = "bf16") -> list[dict]:
    """One record per ``ok`` row, by M, context and file order: the step by its decision ``method`` (µs), tokens/s,
    Σ linear (µs), rest share, the attention split (µs, floor share, ``other_us``) where the file timed the attention
    alone, the speed-up over ``baseline`` per method and as Σ linear predicts it."""
    sp, lsp = speedups(rows, baseline), linear_speedup(rows, baseline)
    out = []
    for r in sorted((r for r in rows if r.status == "ok"), key=lambda r: (r.m, r.context)):
        method, a = decision_method(r), r.attention
        out.append({"scheme": r.scheme, "m": r.m, "context": r.context, "method": method,
                    "step_us": r.step_us(method), "tokens_per_s": r.tokens_per_s.get(method),
                    "linear_us": (r.linear or {}).get("sum_us"), "rest_share": r.remainder_share.get(method),
                    **({"attention_us": a.get("us"), "attention_floor": a.get("floor_fraction"),
                        "other_us": _rest(r.other_us.get(method))} if a else {}),
                    "speedup": dict(sp.get(r.key, {})), "linear_speedup": lsp.get(r.key),
                    "reasons": {m: why.text for m, why in r.latency_reasons.items()}})
    return out


def sweep(rows: Sequence[StepRow], baseline: str = "bf16") -> list[dict]:
    """The context sweep per (scheme, M), the baseline's forms left out: ``contexts``, ``breakeven``
    (:func:`breakeven`) and ``compared`` (False: no context has a speed-up)."""
    be, sp = breakeven(rows, baseline), speedups(rows, baseline)
    out = []
    ok = [r for r in rows if r.status == "ok" and r.scheme not in (baseline, f"{baseline}+compiled")]
    for scheme, m in dict.fromkeys((r.scheme, r.m) for r in ok):
        mine = sorted((r for r in ok if (r.scheme, r.m) == (scheme, m)), key=lambda r: r.context)
        out.append({"scheme": scheme, "m": m, "contexts": [r.context for r in mine], "breakeven": be.get((scheme, m)),
                    "compared": any(sp.get(r.key, {}).get(decision_method(r)) for r in mine)})
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
    or ``within``) by :func:`qbench.judge.pick_within_noise` on the decision method's step (ties: the smaller
    context's pick, then ``tie_error``, default the logits error, then bytes): its ``method``, ``step_us``,
    ``tokens_per_s``, ``speedup`` (``doubt``: :func:`speedup_doubts`), ``rel_fro``, ``compared``, ``ties``,
    ``fastest``, ``within`` / ``timed`` counts, ``untimed``, ``timing_flags``, ``pick_flags``, ``baseline_flags``."""
    sp, base_of, doubts = speedups(rows, baseline), _baseline_of(rows, baseline), speedup_doubts(rows, baseline)
    in_budget = within or (lambda r: logits_error(r) is not None and logits_error(r) <= max_rel_err)
    out, previous = [], {}
    for m, context in sorted({(r.m, r.context) for r in rows}):
        here = [r for r in rows if r.m == m and r.context == context and r.status == "ok"]
        timed = [r for r in here if decision_method(r)]
        within = [r for r in timed if in_budget(r)]
        best, _, fastest, group = judge.pick_within_noise(
            within, time=lambda r: r.step_us(decision_method(r)), same=judge.within_noise,
            error=tie_error or logits_error, size=lambda r: (r.bytes or {}).get("total"), name=lambda r: r.scheme,
            previous=previous.get(m))
        if best:  # a context without a pick leaves the last pick to the next context
            previous[m] = best.scheme
        method = decision_method(best) if best else None
        ties = sorted((r for r in group if r is not best), key=lambda r: r.step_us(decision_method(r)))
        timing = {r.scheme: d for r in group if (d := [f for f in r.flag_names if f in DOUBT_FLAGS])}
        out.append({"m": m, "context": context, "pick": best and best.scheme, "method": method,
                    "step_us": best and best.step_us(method), "tokens_per_s": best and best.tokens_per_s.get(method),
                    "speedup": best and sp.get(best.key, {}).get(method),
                    "doubt": doubts.get(best.key, []) if best else [], "rel_fro": best and logits_error(best),
                    "compared": best and (best.error or {}).get("compared"), "ties": [r.scheme for r in ties],
                    "fastest": fastest.scheme if fastest else None, "timing_flags": timing,
                    "pick_flags": best.flag_names if best else [],
                    "baseline_flags": {b.scheme: b.flag_names for b in [base_of(best) if best else None]
                                       if b is not None and b is not best and b.flag_names},
                    "within": len(within), "timed": len(timed),
                    "untimed": [r.scheme for r in here if not decision_method(r)]})
    return out


def recommend_view(baseline: str = "bf16") -> View:
    """The table of :func:`recommend` records: per M and context the pick and its step."""
    cols = [entry("m", "M", str, True), entry("context", "context", str, True),
            Column("pick", "fastest step within the budget", lambda r: r["pick"] or "none"),
            Column("method", "step method", lambda r: SHORT.get(r["method"], DASH)),
            entry("step_us", "step µs", "us"), entry("tokens_per_s", "tokens/s", ".0f"),
            entry("speedup", f"×{baseline}", "ratio", cell_override=lambda r: marked_ratio(r["speedup"], r["doubt"])),
            entry("rel_fro", "logits err", ".3g"),
            Column("within", "within budget", lambda r: f"{r['within']} of {r['timed']}", numeric=True)]
    return View("model-step recommend", cols,
                short={"context": "ctx", "pick": "pick", "method": "method", "within": "within"})


def model_view(records: Sequence[dict], baseline: str = "bf16", max_rel_err: Optional[float] = None) -> View:
    """The table of ``qbench model`` on step files over :func:`model_records` records (with ``rel_fro``,
    ``over_budget``, ``_doubt``); the speed-up by the row's method (narrow) or per method (wide)."""
    b, methods = baseline, [m for m in STEP_METHODS if any(m in r["speedup"] for r in records)]

    def speedup(r: dict, m: Optional[str]) -> str:
        return marked_ratio(r["speedup"].get(m), m == r["method"] and r["_doubt"][2])

    cols = [entry("m", "M", str, True), entry("context", "context", str, True), entry("scheme", "scheme"),
            Column("method", "step method", lambda r: SHORT.get(r["method"], r["method"] or DASH)),
            entry("step_us", "step µs (measured)", "us"),
            entry("tokens_per_s", "tokens/s", ".0f"), entry("linear_us", "Σ linear µs", "us"),
            Column("rest_pct", "rest", lambda r: None if r["rest_share"] is None or r["_doubt"][0]
                   else 100 * r["rest_share"], "pct"),
            entry("attention_us", "attention µs", "us"), entry("attention_floor", "attn floor", "pct", scale=100),
            entry("other_us", "other µs", "us"),
            Column("speedup", f"×{b}", lambda r: r["speedup"].get(r["method"]), numeric=True,
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
    for r in (r for r in rec if r["ties"]):
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
    for r in (r for r in rec if r["pick"] and (r["pick_flags"] or r["baseline_flags"])):
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
    for r in (r for r in rows if r.status != "ok"):
        failed.setdefault(r.scheme, f"{r.status}: {r.reason or 'no reason recorded'}")
    if failed:
        lines.append("not measured (no ok row, not considered): "
                     + "; ".join(f"{s}: {why[:160]}" for s, why in failed.items()))
    untimed = sorted({s for r in rec for s in r["untimed"]})
    if untimed:
        lines.append(f"not timed (no step time, not considered): {', '.join(untimed)}")
    return lines + inductor_note(rows)
