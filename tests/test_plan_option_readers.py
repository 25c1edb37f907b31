"""The apps that read a plan option read it typed (``planner.option.PlanOption``), never as a dict.

A stored option is read in one place (``PlanOption.from_json``), so a renamed key fails there
and mypy checks every use. This walks the syntax of launcher/, frontend/, profiler/ and fleet/
(not migrations, which keep their historical dict code) and finds the two forms the dict reads
took: a subscript or ``.get`` of a key only a plan option's node group has (``g["count"]`` is
ambiguous, ``g["gpus_per_node"]`` is not), and a subscript or ``.get`` on a variable or an
attribute named ``option`` (``job.option.get("global_batch")``).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONSUMERS = ("launcher", "frontend", "profiler", "fleet")
# Keys of a stored option that nothing else in the consumers is called.
OPTION_ONLY_KEYS = frozenset(
    {"groups", "gpus_per_node", "batch_per_node", "price_per_hour", "interruption_bucket", "gpu_model"}
)
OPTION_NAMES = frozenset({"option"})


def _key_read(node: ast.AST) -> tuple[ast.expr, str] | None:
    """(the read object, the constant key) of ``x["key"]`` or ``x.get("key", ...)``; else None."""
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        return node.value, str(node.slice.value)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "get"
        and node.args
        and isinstance(node.args[0], ast.Constant)
    ):
        return node.func.value, str(node.args[0].value)
    return None


def dict_reads(source: str) -> list[str]:
    """Each dict read of a plan option in ``source``: ``line: code``."""
    found = []
    for node in ast.walk(ast.parse(source)):  # breadth first: sort to read in line order
        read = _key_read(node)
        if read is None or not isinstance(node, ast.expr):  # (a subscript or a call is one)
            continue
        target, key = read
        named = (isinstance(target, ast.Name) and target.id in OPTION_NAMES) or (
            isinstance(target, ast.Attribute) and target.attr in OPTION_NAMES  # job.option[...]
        )
        if key in OPTION_ONLY_KEYS or named:
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def consumer_files() -> list[Path]:
    return sorted(
        p
        for app in CONSUMERS
        for p in (ROOT / app).rglob("*.py")
        if "migrations" not in p.relative_to(ROOT).parts
    )


def test_the_check_finds_the_forms_the_dict_reads_took():
    old = 'n = sum(int(g["count"]) for g in option["groups"])\nz = g.get("gpus_per_node") or option.get("region")\n'
    assert sorted(dict_reads(old)) == [
        "1: option['groups']",
        "2: g.get('gpus_per_node')",
        "2: option.get('region')",
    ]
    assert dict_reads('b = job.option.get("global_batch")\n') == ["1: job.option.get('global_batch')"]
    assert dict_reads('n = row["count"] + typed.nodes + request.get("region", "")\n') == []


def test_no_consumer_reads_a_plan_option_as_a_dict():
    files = consumer_files()
    assert any(p.name == "options.py" for p in files) and len(files) > 50
    found = [f"{p.relative_to(ROOT)}:{hit}" for p in files for hit in dict_reads(p.read_text())]
    assert found == []
