"""The plans recorded in ``golden_plans.json`` do not change when the code around them moves."""

from __future__ import annotations

import json

import pytest

from tests.planner.golden_plans import GOLDEN, REQUESTS, solve_named

GOLDEN_PLANS = json.loads(GOLDEN.read_text())


def test_every_golden_request_has_a_recording():
    assert sorted(GOLDEN_PLANS) == sorted(REQUESTS)


@pytest.mark.parametrize("name", sorted(REQUESTS))
def test_it_gives_the_recorded_plans_option_by_option(name):
    got = solve_named(name)
    want = GOLDEN_PLANS[name]
    assert len(got) == len(want), f"{name}: {len(got)} options, recorded {len(want)}"
    for g, w in zip(got, want, strict=True):
        for key in ("rank", "region", "groups", "global_batch"):
            assert g.get(key) == w.get(key), (
                f"{name} option {w.get('rank')}: {key} {g.get(key)} != {w.get(key)}"
            )
        for key in ("hourly_usd", "total_usd", "time_h", "time_p90_h"):
            if key in w:
                assert g[key] == pytest.approx(w[key], rel=1e-6), f"{name} option {w['rank']}: {key}"
