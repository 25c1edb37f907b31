"""Why a mix: one sentence that sets a mixed plan beside the best plan of each of its types alone.

"p6-b200.48xlarge alone: $412.10, 1.23 h (16x, spot, us-east-1); g6e.48xlarge alone: no plan
within the $500 budget; the mix uses the spot G quota left (192 vCPU) after p6-b200.48xlarge
reaches the spot P quota (96 vCPU)."

Each type alone is solved with the same request, oracle and offers (every region and market
the request allows), one type, top 1.  The closing clause names what a single type runs into
that the mix does not: the vCPU quota of its class and market (the mix then draws on the quota
of the other class, or of the other market), the node limit, the availability cap; else how
much the mix gains on the objective over the best type alone.  Pure: no Django.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from planner.offers import Candidate
from planner.solver import Infeasible, PerfOracle, Plan, PlanRequest, solve
from planner.solver.explain import fp, ft, pct, usd
from planner.solver.request import quota_table


def _alone(request: PlanRequest, cands: Sequence[Candidate], itype: str, perf: PerfOracle) -> Plan | str:
    """The best plan of ``itype`` alone, or why there is none."""
    pool = [c for c in cands if c.instance_type == itype]
    if not pool:
        return "no offer"
    try:
        return solve(replace(request, max_types=1, top_k=1), pool, perf).best
    except Infeasible as exc:
        return f"no plan ({str(exc).split(';')[0].split(' (')[0]})"


def _nodes(n: int) -> str:
    return f"{n} node" + ("" if n == 1 else "s")


def _limit(
    plan: Plan, request: PlanRequest, by_key: Mapping[tuple[str, str, str], Candidate]
) -> tuple[str, tuple[str, str] | None] | None:
    """What holds a single-type plan back that a mix can add to: its vCPU quota or availability
    (words, and the (market, quota class) when a quota).  The node limit is no reason: it binds
    the mix as much."""
    g = plan.groups[0]
    c = by_key.get((plan.region, g.market, g.instance_type))
    if c is None:
        return None
    q = quota_table(request).get((c.market, c.quota_class))
    if q is not None and c.vcpus > 0 and (g.count + 1) * c.vcpus > q + 1e-9:
        return f"reaches the {c.market} {c.quota_class} quota ({q:g} vCPU) at {_nodes(g.count)}", (
            c.market,
            c.quota_class,
        )
    if c.max_count is not None and g.count >= c.max_count:
        return f"has only {_nodes(c.max_count)} available", None
    return None


def _uses(plan: Plan, by_key: Mapping[tuple[str, str, str], Candidate]) -> str:
    """Which quota each group of the mix draws on."""
    parts = []
    for g in plan.groups:
        c = by_key.get((plan.region, g.market, g.instance_type))
        if c is not None:
            parts.append(f"the {c.market} {c.quota_class} quota for {g.count}x {g.instance_type}")
    return "the mix draws on " + " and ".join(parts)


def _gain(plan: Plan, best: Plan, objective: str, name: str) -> str:
    """How the mix compares with the best type alone on the objective (both ways in words)."""
    if objective == "cost":
        d = best.total_usd - plan.total_usd
        return (
            f"the mix is {usd(d)} ({fp(pct(plan.total_usd, best.total_usd))}) cheaper than {name} alone"
            if d > 0
            else f"the mix costs {usd(-d)} ({fp(pct(plan.total_usd, best.total_usd))}) more than {name} alone"
        )
    if objective == "time":
        d = best.time_h - plan.time_h
        return (
            f"the mix finishes {fp(pct(plan.time_h, best.time_h))} sooner than {name} alone"
            if d > 0
            else f"the mix takes {fp(pct(plan.time_h, best.time_h))} longer than {name} alone"
        )
    ours, theirs = plan.effective_throughput_sps, best.effective_throughput_sps
    return (
        f"the mix trains {fp(pct(ours, theirs))} more samples/s than {name} alone"
        if ours > theirs
        else f"the mix trains {fp(pct(ours, theirs))} fewer samples/s than {name} alone"
    )


def _value(p: Plan, objective: str) -> float:
    return {"cost": p.total_usd, "time": p.time_h}.get(objective, -p.effective_throughput_sps)


def why_mix(
    plan: Plan,
    request: PlanRequest,
    cands: Sequence[Candidate],
    perf: PerfOracle,
    cache: dict[str, Plan | str] | None = None,
) -> str | None:
    """The sentence for a mixed ``plan`` (None for a single type).  ``cache`` (instance type ->
    its best plan alone) saves re-solving a type shared by several mixed plans."""
    types = list(dict.fromkeys(g.instance_type for g in plan.groups))
    if len(types) < 2:
        return None
    cache = {} if cache is None else cache
    by_key = {(c.region, c.market, c.instance_type): c for c in cands}
    parts: list[str] = []
    singles: list[tuple[str, Plan]] = []
    for t in types:
        if t not in cache:
            cache[t] = _alone(request, cands, t, perf)
        alone = cache[t]
        if isinstance(alone, str):
            parts.append(f"{t} alone: {alone}")
            continue
        g = alone.groups[0]
        market = "spot" if g.market == "spot" else "on demand"
        parts.append(
            f"{t} alone: {usd(alone.total_usd)}, {ft(alone.time_h)} ({g.count}x, {market}, {alone.region})"
        )
        singles.append((t, alone))
    if not singles:
        return "; ".join(parts) + "; no type alone meets the constraints, together they do."
    name, best = min(singles, key=lambda tp: _value(tp[1], request.objective))
    tail = _gain(plan, best, request.objective, name)
    if _value(plan, request.objective) < _value(best, request.objective):
        # the mix wins: say what a single type runs into that the mix gets round
        limits = [(t, lim) for t, p in singles if (lim := _limit(p, request, by_key))]
        if limits:
            held = " and ".join(f"{t} alone {words}" for t, (words, _) in limits)
            uses = _uses(plan, by_key) if any(q for _, (_, q) in limits) else "the mix adds the other type"
            tail = f"{held}; {uses}: {tail.removeprefix('the mix ')}"
    return "; ".join(parts) + "; " + tail + "."


def mix_reasons(
    plans: Sequence[Plan], request: PlanRequest, cands: Sequence[Candidate], perf: PerfOracle
) -> dict[str, str]:
    """``{str(rank): sentence}`` for every mixed plan (JSON keys are strings)."""
    cache: dict[str, Plan | str] = {}
    out: dict[str, str] = {}
    for p in plans:
        text = why_mix(p, request, cands, perf, cache)
        if text is not None:
            out[str(p.rank)] = text
    return out
