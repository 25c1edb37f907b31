"""The words: why a plan was ranked where it is, which constraints bind it, and why a request
has no plan.

When nothing is feasible, :func:`explain_infeasible` names the binding constraint by re-solving
with constraints relaxed (the fastest plan against the deadline, the cheapest against the
budget, the lowest $/h against the cap, the lowest miss risk against ``max_miss_risk``, and the
quotas when lifting them would help); the :class:`~planner.solver.request.Infeasible` it returns
carries the constraint's request field name in ``constraint``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace

from planner.solver.evaluate import Col, Spec
from planner.solver.request import REL, Engine, Infeasible, PlanRequest, max_count, qkey

# the search engine as this module uses it: a protocol, so explain never imports the search
SolveEngine = Engine[Spec, Col]


def fh(hours: float) -> str:
    """Hours with two decimals below 10 h, one above."""
    return f"{hours:.2f}" if hours < 10 else f"{hours:.1f}"


def ft(hours: float) -> str:
    """A duration with its unit: minutes below an hour ("32 min"), else hours ("1.62 h")."""
    return f"{hours * 60:.0f} min" if hours < 1 else f"{fh(hours)} h"


def pct(a: float, b: float) -> float:
    return 100.0 * (a - b) / b if b else 0.0


def fp(x: float) -> str:
    """Percentage with sensible precision (``x`` >= 0)."""
    x = abs(x)
    if x < 0.1:
        return "<0.1%" if x > 0 else "0%"
    return f"{x:.1f}%" if x < 10 else f"{x:.0f}%"


def usd(x: float) -> str:
    """A money figure with its currency: cents below $100, whole dollars above."""
    return f"${x:,.2f}" if abs(x) < 100 else f"${x:,.0f}"


def saves_or_costs(ours: float, theirs: float) -> str:
    """Our total against another plan's, as words that never read as a negative saving:
    "saves $120 (45%)", "costs $30.00 more (12%)", "costs $3,460 more (14.4× as much)"."""
    d = theirs - ours
    if abs(d) < 0.005:
        return "same cost"
    if d > 0:
        return f"saves {usd(d)} ({fp(100 * d / theirs)})" if theirs > 0 else f"saves {usd(d)}"
    ratio = ours / theirs if theirs > 0 else math.inf
    if ratio >= 1.5:
        times = f"{ratio:.1f}× as much" if math.isfinite(ratio) else "where it costs nothing"
        return f"costs {usd(-d)} more ({times})"
    return f"costs {usd(-d)} more ({fp(100 * -d / theirs)})"


def sooner_or_longer(ours_h: float, theirs_h: float) -> str:
    """Our time against another plan's: "finishes 2.40 h sooner (35%)", "takes 12 min longer (4.0%)"."""
    d = theirs_h - ours_h
    if theirs_h <= 0 or abs(d) / theirs_h < 0.0005:
        return "same time"
    span = ft(abs(d))
    if d > 0:
        ratio = theirs_h / ours_h if ours_h > 0 else math.inf
        # "100%" sooner reads as instant: past 2x say how many times as fast
        share = (
            f"{ratio:.1f}× as fast"
            if 2 <= ratio < 10
            else f"{ratio:.0f}× as fast"
            if ratio >= 10
            else fp(100 * d / theirs_h)
        )
        return f"finishes {span} sooner ({share})"
    ratio = ours_h / theirs_h
    share = f"{ratio:.1f}× as long" if ratio >= 2 else fp(100 * -d / theirs_h)
    return f"takes {span} longer ({share})"


def objective_phrase(spec: Spec, req: PlanRequest) -> str:
    if spec.objective == "cost":
        return f"cheapest plan meeting the {req.deadline_hours:g} h deadline"
    if spec.objective == "time":
        return f"fastest plan within the {usd(req.budget_usd or 0.0)} budget"
    return f"highest throughput within ${req.max_hourly_usd:,.2f}/h"


def dominance_text(spec: Spec, req: PlanRequest, optimum: Col, chosen: Col) -> str:
    """Why plan #1 is not the plain optimum: it is as fast (within 0.5 %) and cheaper, or as cheap
    and faster (:func:`planner.solver.rank.dominates`)."""
    ref = f"{optimum.label()} in {optimum.region}: {ft(optimum.time)}, {usd(optimum.cost)}"
    if chosen.cost < optimum.cost:
        slower = pct(chosen.time, optimum.time)
        speed = "as fast as" if slower <= 0 else f"{fp(slower)} slower than"
        return (
            f"{speed} the {objective_phrase(spec, req)} ({ref}) but {usd(optimum.cost - chosen.cost)} "
            f"cheaper ({fp(pct(chosen.cost, optimum.cost))} less): within 0.5% of its time, the cheaper "
            "plan ranks first"
        )
    return (
        f"as cheap as the {objective_phrase(spec, req)} ({ref}) and {ft(optimum.time - chosen.time)} "
        "faster, so it ranks first"
    )


def cluster(col: Col) -> tuple[tuple[str, int], ...]:
    """The hardware of a column, whatever its market and region."""
    return tuple(sorted((c.instance_type, n) for c, n in col.groups))


def twin_text(rank: int, col: Col, cols: Sequence[Col]) -> str | None:
    """When a higher-ranked plan is the same cluster in the other market: what this one trades."""
    spot = any(c.is_spot for c, _ in col.groups)
    for j, other in enumerate(cols[:rank]):
        if cluster(other) != cluster(col) or any(c.is_spot for c, _ in other.groups) == spot:
            continue
        if not spot:
            return (
                f"same cluster as #{j + 1} on spot: {usd(col.cost - other.cost)} more"
                if col.cost >= other.cost
                else f"same cluster as #{j + 1} on spot: {usd(other.cost - col.cost)} less"
            ) + " for no interruption risk"
        return f"same cluster as #{j + 1} on demand: {fp(pct(col.time, other.time))} " + (
            f"slower from spot interruptions, {usd(other.cost - col.cost)} cheaper"
            if col.cost <= other.cost
            else f"slower from spot interruptions, {usd(col.cost - other.cost)} dearer"
        )
    return None


def why_text(
    rank: int, col: Col, cols: Sequence[Col], spec: Spec, req: PlanRequest, binding: list[str]
) -> str:
    obj = spec.objective
    what = objective_phrase(spec, req)
    parts: list[str] = []
    if rank == 0:
        parts.append(what)
        if len(cols) > 1:
            nxt = cols[1]
            if obj == "cost":
                word = "cheaper" if col.cost <= nxt.cost else "dearer"
                parts.append(f"{fp(pct(col.cost, nxt.cost))} {word} than the next option ({nxt.label()})")
            elif obj == "time":
                word = "faster" if col.time <= nxt.time else "slower"
                parts.append(f"{fp(pct(col.time, nxt.time))} {word} than the next option ({nxt.label()})")
            else:
                word = "more" if col.good >= nxt.good else "less"
                parts.append(
                    f"{fp(pct(col.good, nxt.good))} {word} throughput than the next option ({nxt.label()})"
                )
    else:
        best = cols[0]
        if obj == "cost":
            word = "dearer" if col.cost >= best.cost else "cheaper"
            parts.append(f"#{rank + 1}: {fp(pct(col.cost, best.cost))} {word} than #1")
            if col.time < best.time:
                parts.append(f"{ft(best.time - col.time)} faster")
        elif obj == "time":
            word = "slower" if col.time >= best.time else "faster"
            parts.append(f"#{rank + 1}: {fp(pct(col.time, best.time))} {word} than #1")
            if col.cost < best.cost:
                parts.append(f"{usd(best.cost - col.cost)} cheaper")
        else:
            word = "less" if col.good <= best.good else "more"
            parts.append(f"#{rank + 1}: {fp(pct(col.good, best.good))} {word} throughput than #1")
            if col.rate < best.rate:
                parts.append(f"${best.rate - col.rate:,.2f}/h cheaper")
        twin = twin_text(rank, col, cols)
        if twin is not None:
            parts.append(twin)
        elif not any(c.is_spot for c, _ in col.groups) and any(c.is_spot for c, _ in best.groups):
            parts.append("no spot interruptions")
    if len(col.groups) > 1:
        parts.append(f"mixes {len(col.groups)} node types")
    if binding:
        parts.append("binding: " + ", ".join(binding))
    return "; ".join(parts)


def binding(col: Col, spec: Spec, req: PlanRequest) -> list[str]:
    out: list[str] = []
    for qk, used in col.vcpus.items():
        q = spec.quotas.get(qk)
        if q is None:
            continue
        smallest = min(c.vcpus for c, _ in col.groups if qkey(c) == qk)
        if used + smallest > q + 1e-9:
            out.append(f"{qk[0]} quota {qk[1]}={q:g} vCPU")
    if col.nodes >= req.max_nodes:
        out.append(f"max_nodes={req.max_nodes}")
    for c, n in col.groups:
        if c.max_count is not None and n >= c.max_count:
            out.append(f"availability of {c.instance_type} ({c.max_count})")
    return out


# ----------------------------------------------------------------------------------- infeasibility
def _best(engine: SolveEngine, spec: Spec) -> Col | None:
    out = engine.run(replace(spec, top_k=1), want_points=False)
    return min(out.cols, key=lambda c: (c.value, c.nodes)) if out.cols else None


def _quota_note(engine: SolveEngine, col: Col, quotas: Mapping[tuple[str, str], float]) -> str:
    notes = []
    for c, n in col.groups:
        q = quotas.get(qkey(c))
        if q is not None and c.vcpus > 0 and n * c.vcpus > q:
            allowed = int(q // c.vcpus)
            notes.append(
                f"quota {c.quota_class}={q:g} vCPU ({c.market}) allows at most {allowed} {c.instance_type}"
            )
    return "; ".join(notes)


def explain_infeasible(engine: SolveEngine, spec: Spec) -> Infeasible:
    req = engine.request
    if not engine.candidates_in:
        return Infeasible("no candidate instances in the allowed regions/markets", "candidates")
    if not engine.kept:
        return Infeasible(
            "the performance model cannot run this job on any candidate instance "
            "(e.g. the model does not fit in GPU memory at these batch sizes)",
            "candidates",
        )
    if all(max_count(c, spec.quotas, engine.N) < 1 for c in engine.kept):
        qs = ", ".join(f"{cls}={q:g} vCPU ({m})" for (m, cls), q in sorted(spec.quotas.items()))
        smallest = min(engine.kept, key=lambda c: c.vcpus)
        return Infeasible(
            f"quotas {qs} admit no instance: the smallest candidate, {smallest.instance_type}, "
            f"needs {smallest.vcpus} vCPU",
            "quotas",
        )
    no_q = replace(spec, quotas={})
    if spec.deadline is not None:
        fastest = _best(engine, replace(spec, objective="time", deadline=None, risk=None))
        if fastest is None or fastest.time > spec.deadline * (1 + REL):
            if fastest is None:
                # nothing meets the other constraints at all: report those instead
                return _explain_without_deadline(engine, spec)
            msg = (
                f"fastest config needs {fh(fastest.time)} h > deadline {spec.deadline:g} h "
                f"({fastest.label()} in {fastest.region}, max_nodes={req.max_nodes})"
            )
            free = (
                _best(engine, replace(no_q, objective="time", deadline=None, risk=None))
                if spec.quotas
                else None
            )
            if free is not None and free.time <= spec.deadline * (1 + REL):
                note = _quota_note(engine, free, spec.quotas)
                return Infeasible(
                    f"{msg}; {note} (without quotas {free.label()} would take {fh(free.time)} h)",
                    "quotas",
                    {"fastest_h": fastest.time, "deadline_h": spec.deadline},
                )
            details = {"fastest_h": fastest.time, "deadline_h": spec.deadline}
            if spec.budget is not None:
                cheapest = _best(engine, replace(spec, objective="cost", budget=None, cap=None, risk=None))
                if cheapest is not None and cheapest.cost > spec.budget * (1 + REL):
                    return Infeasible(
                        f"{msg}; meeting the deadline costs at least {usd(cheapest.cost)} > budget "
                        f"{usd(spec.budget)} ({cheapest.label()} in {cheapest.region})",
                        "budget_usd",
                        {**details, "cheapest_usd": cheapest.cost},
                    )
            if spec.cap is not None:
                lowest = _best(engine, replace(spec, objective="rate", budget=None, cap=None, risk=None))
                if lowest is not None and lowest.rate > spec.cap * (1 + REL):
                    return Infeasible(
                        f"{msg}; meeting the deadline needs at least ${lowest.rate:,.2f}/h > cap "
                        f"${spec.cap:,.2f}/h ({lowest.label()} in {lowest.region})",
                        "max_hourly_usd",
                        {**details, "cheapest_per_hour": lowest.rate},
                    )
            return Infeasible(msg, "deadline_hours", details)
    if spec.budget is not None:
        cheapest = _best(engine, replace(spec, objective="cost", budget=None, risk=None))
        if cheapest is None or cheapest.cost > spec.budget * (1 + REL):
            if cheapest is None:
                return _explain_without_deadline(engine, spec)
            return Infeasible(
                f"budget {usd(spec.budget)} < cheapest {usd(cheapest.cost)} "
                f"({cheapest.label()} in {cheapest.region}, {fh(cheapest.time)} h)",
                "budget_usd",
                {"cheapest_usd": cheapest.cost, "budget_usd": spec.budget},
            )
    if spec.cap is not None:
        lowest = _best(engine, replace(spec, objective="rate", cap=None, risk=None))
        if lowest is None or lowest.rate > spec.cap * (1 + REL):
            if lowest is None:
                return _explain_without_deadline(engine, spec)
            return Infeasible(
                f"max ${spec.cap:,.2f}/h < cheapest feasible ${lowest.rate:,.2f}/h "
                f"({lowest.label()} in {lowest.region})",
                "max_hourly_usd",
                {"cheapest_per_hour": lowest.rate, "max_hourly_usd": spec.cap},
            )
    if spec.risk is not None:
        relaxed = engine.run(replace(spec, risk=None, top_k=10**6), want_points=False).cols
        risks = [(engine.risk_of(c, spec.deadline) or 0.0, c) for c in relaxed]
        if risks:
            r, c = min(risks, key=lambda x: x[0])
            return Infeasible(
                f"lowest deadline-miss risk among plans meeting the other constraints is "
                f"{100 * r:.1f}% > max_miss_risk {100 * spec.risk:.1f}% ({c.label()} in {c.region})",
                "max_miss_risk",
                {"lowest_risk": r},
            )
    return Infeasible(
        "constraints are jointly infeasible (deadline, budget and $/hour cap cannot all be met)",
        "deadline_hours",
    )


def _explain_without_deadline(engine: SolveEngine, spec: Spec) -> Infeasible:
    """Nothing satisfies the non-deadline constraints: name the budget / cap / quota that binds."""
    base = replace(spec, deadline=None, risk=None)
    if spec.cap is not None:
        lowest = _best(engine, replace(base, objective="rate", cap=None, budget=None))
        if lowest is not None and lowest.rate > spec.cap * (1 + REL):
            return Infeasible(
                f"max ${spec.cap:,.2f}/h < cheapest node ${lowest.rate:,.2f}/h ({lowest.label()} in "
                f"{lowest.region})",
                "max_hourly_usd",
                {"cheapest_per_hour": lowest.rate},
            )
    if spec.budget is not None:
        cheapest = _best(engine, replace(base, objective="cost", budget=None))
        if cheapest is not None and cheapest.cost > spec.budget * (1 + REL):
            return Infeasible(
                f"budget {usd(spec.budget)} < cheapest {usd(cheapest.cost)} ({cheapest.label()} in "
                f"{cheapest.region}, {fh(cheapest.time)} h)",
                "budget_usd",
                {"cheapest_usd": cheapest.cost},
            )
    return Infeasible("no configuration satisfies the quotas and node limits", "quotas")
