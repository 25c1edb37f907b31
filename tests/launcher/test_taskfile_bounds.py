"""What a task file may ask, bounded (issue 37 review): alternatives a plan checks every offer
against, finite amounts; and a Local Zone's region read from its name."""

from __future__ import annotations

import pytest

from launcher import taskfile


def _issues(text: str) -> list[tuple[int | None, str, str]]:
    with pytest.raises(taskfile.TaskFileError) as exc:
        taskfile.parse_task(text)
    return [(i.line, i.field, i.message) for i in exc.value.issues]


def test_more_than_64_any_of_entries_are_refused_naming_the_list():
    entries = "".join(f"    - {{cpus: {n}+}}\n" for n in range(1, 66))
    [(line, field, message)] = _issues(f"resources:\n  any_of:\n{entries}run: x\n")
    assert (line, field) == (2, "resources.any_of") and "at most 64 entries" in message


def test_64_any_of_entries_are_read():
    entries = "".join(f"    - {{cpus: {n}+}}\n" for n in range(1, 65))
    assert len(taskfile.parse_task(f"resources:\n  any_of:\n{entries}run: x\n").resources.choices) == 64


def test_more_than_64_accelerator_alternatives_are_refused():
    names = ", ".join(f"G{n}: 1" for n in range(65))
    [(line, field, message)] = _issues(f"resources:\n  accelerators: {{{names}}}\nrun: x\n")
    assert (line, field) == (2, "resources.accelerators") and "at most 64 alternatives" in message


@pytest.mark.parametrize("value", [".inf", "1e400", "2000000+", "1000T"])
def test_an_amount_that_is_not_finite_or_too_large_is_refused(value):
    [(line, field, _message)] = _issues(f"resources:\n  memory: {value}\nrun: x\n")
    assert (line, field) == (2, "resources.memory")


@pytest.mark.parametrize(
    ("zone", "region"),
    [("us-east-2a", "us-east-2"), ("us-east-1-bos-1a", "us-east-1"), ("us-west-2-lax-1b", "us-west-2")],
)
def test_a_zone_alone_is_planned_in_the_region_its_name_starts_with(zone, region):
    assert taskfile.parse_task(f"resources: {{zone: {zone}}}\nrun: x\n").resources.region == region
