"""``money_tree``: the API's one rule for money inside JSON it passes through (a plan's result,
a job's option): values of money keys at any depth become decimal strings, nothing else changes."""

from __future__ import annotations

import copy
from decimal import Decimal

from srifty_web.money import MONEY_TREE_PLACES, is_money_key, money_tree


def test_it_names_the_keys_ending_in_usd_and_the_per_hour_prices_money():
    money = ["hourly_usd", "total_usd", "cost_p90_usd", "budget_usd", "max_hourly_usd", "price_per_hour"]
    assert all(is_money_key(k) for k in [*money, "usd_per_hour"])
    assert not any(is_money_key(k) for k in ["time_h", "usd", "throughput_sps", "usd_rate", 3, None])


def test_it_turns_money_at_any_depth_into_fixed_place_strings_and_leaves_the_rest():
    stored = {
        "plans": [{"hourly_usd": 2.5, "time_h": 1.25, "groups": [{"price_per_hour": 1.25, "count": 2}]}],
        "alternatives": {"spot": {"plan": {"total_usd": 10}}},
        "points": [{"total_usd": 0.123456789, "feasible": True}],
        "label": "2x g5 (1.5 USD)",
    }
    before = copy.deepcopy(stored)
    shown = money_tree(stored)
    assert stored == before  # a copy: the stored result keeps numbers
    assert shown == {
        "plans": [
            {"hourly_usd": "2.5000", "time_h": 1.25, "groups": [{"price_per_hour": "1.2500", "count": 2}]}
        ],
        "alternatives": {"spot": {"plan": {"total_usd": "10.0000"}}},
        "points": [{"total_usd": "0.1235", "feasible": True}],
        "label": "2x g5 (1.5 USD)",
    }
    assert Decimal(shown["points"][0]["total_usd"]).as_tuple().exponent == -MONEY_TREE_PLACES


def test_it_keeps_none_strings_and_booleans_and_is_idempotent():
    value = {
        "budget_usd": None,
        "max_hourly_usd": "3.0000",
        "spend_usd": True,
        "cost_usd": Decimal("1.23456"),
    }
    once = money_tree(value)
    assert once == {"budget_usd": None, "max_hourly_usd": "3.0000", "spend_usd": True, "cost_usd": "1.2346"}
    assert money_tree(once) == once


def test_it_walks_into_a_container_under_a_money_key():
    assert money_tree({"by_market_usd": {"spot": 1, "on_demand_usd": 2}}) == {
        "by_market_usd": {"spot": 1, "on_demand_usd": "2.0000"}
    }
