"""``manage.py plan`` compares plan #1 with each baseline in words, never a signed percentage."""

from __future__ import annotations

import re

import pytest
from django.core.management import call_command

pytestmark = pytest.mark.django_db


def test_the_plan_command_says_what_plan_1_saves_or_costs_against_each_baseline(catalog, staff, capsys):
    call_command(
        "plan",
        *("--model", "torchvision:squeezenet1_1", "--input-shape", "3,32,32"),
        *("--samples", "100000", "--epochs", "5", "--objective", "cost", "--deadline-hours", "12"),
        *("--regions", "us-east-1", "--spot", "--max-nodes", "4", "--baseline-gpu", "A100"),
    )
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("baseline ")]
    assert lines
    for line in lines:
        if " — plan #1 " in line:
            versus = line.split(" — plan #1 ", 1)[1]
            assert re.match(r"(saves \$|costs \$[0-9,.]+ more|same cost)", versus), line
            assert re.search(r", (finishes .* sooner|takes .* longer|same time)", versus), line
        assert not re.search(r"[-+][0-9.]+%", line), line
