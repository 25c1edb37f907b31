"""Words and numbers (planner/solver/explain.py): comparisons never read as a negative saving,
and every money figure carries its currency."""

from __future__ import annotations

import random
import re

import pytest

from planner.solver.explain import saves_or_costs, sooner_or_longer, usd


@pytest.mark.parametrize(
    ("ours", "theirs", "words"),
    [
        (55.0, 175.0, "saves $120 (69%)"),
        (130.0, 100.0, "costs $30.00 more (30%)"),
        (3700.0, 256.94, "costs $3,443 more (14.4× as much)"),
        (100.0, 100.001, "same cost"),
    ],
)
def test_it_says_saves_or_costs_more_with_the_dollars(ours, theirs, words):
    assert saves_or_costs(ours, theirs) == words


@pytest.mark.parametrize(
    ("ours", "theirs", "words"),
    [
        (3.0, 4.4, "finishes 1.40 h sooner (32%)"),
        (2.0, 4.4, "finishes 2.40 h sooner (2.2× as fast)"),
        (0.5, 130.9, "finishes 130.4 h sooner (262× as fast)"),
        (5.2, 5.0, "takes 12 min longer (4.0%)"),
        (10.0, 4.0, "takes 6.00 h longer (2.5× as long)"),
        (5.0, 5.0001, "same time"),
    ],
)
def test_it_says_sooner_or_longer_with_the_unit(ours, theirs, words):
    assert sooner_or_longer(ours, theirs) == words


def test_no_comparison_ever_has_a_minus_sign_or_a_money_figure_without_dollars():
    rng = random.Random(5)
    for _ in range(500):
        a, b = rng.uniform(0.01, 5000), rng.uniform(0.01, 5000)
        for text in (saves_or_costs(a, b), sooner_or_longer(a / 100, b / 100)):
            assert "-" not in text and "−" not in text
            # every number is a $ amount, a percentage, a ratio or has a time unit
            for num in re.finditer(r"[$]?[0-9][0-9,.]*(%|×| h| min)?", text):
                assert num.group().startswith("$") or num.group(1), (text, num.group())


def test_usd_keeps_cents_below_100_dollars():
    assert usd(65.7) == "$65.70" and usd(251.2) == "$251" and usd(12345.6) == "$12,346"
