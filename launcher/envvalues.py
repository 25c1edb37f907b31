"""Values for a task file's ``envs`` and ``secrets`` given at launch, as ``sky launch --env
NAME=VALUE`` / ``--secret`` give them: the API's ``env`` (``POST /jobs/preview/`` and
``POST /jobs/``), the launch dialog's inputs and ``manage.py launch --env``.

A file may leave a value to the launch (``envs: {HF_TOKEN: null}``; ``taskfile.TaskSpec.required_envs``)
or have one the launch replaces. :func:`with_values` writes each value into the task file's text
in place of what the file says there, on the same line, so the job keeps it where it keeps the
rest of its task (``Job.task``, no new column): the nodes get it as they get every other env (the
task is parsed for their environment, ``taskfile.node_env``), a re-plan launches it again, and the
launch confirmation binds it (it binds a digest of the task's text).

Nothing shows a secret back: wherever the file is shown (the job API and page, the preview) it goes
through ``taskfile.redacted``, which hides the values of ``secrets`` and of credential-like env
names (``HF_TOKEN``, ``WANDB_API_KEY``) by finding them in the text. So a value stands verbatim in
the text: one line, quoted with ``'`` (or ``"`` when it holds a ``'``), and a hidden value has at
least :data:`MIN_HIDDEN_CHARS` characters (a shorter one is left shown by ``redacted``). The
database holds the values as it holds a secret written in the file (``Job.task``).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from typing import Any

import yaml

from launcher import taskfile

MAX_ENV_VALUES = 100  # names given at one launch
MAX_ENV_VALUE_CHARS = 4096
MAX_NAME_CHARS = 128
MIN_HIDDEN_CHARS = 4  # taskfile.redacted leaves shorter values shown


class EnvValueError(ValueError):
    """Values that cannot be given: one message per problem, each naming its env."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


def check_values(values: Any) -> dict[str, str]:
    """``{NAME: value}`` as given (JSON object, form fields, ``--env`` words), checked: names as in
    a task file, values strings of one line without control characters, bounded."""
    if not isinstance(values, Mapping):
        raise EnvValueError(["an object {NAME: value}"])
    if len(values) > MAX_ENV_VALUES:
        raise EnvValueError([f"at most {MAX_ENV_VALUES} values"])
    problems = []
    for name, value in values.items():
        if not isinstance(name, str) or not taskfile.ENV_RE.match(name) or len(name) > MAX_NAME_CHARS:
            problems.append(
                f"{str(name)[:64]!r}: names are letters, digits and '_', not starting with a digit"
            )
        elif not isinstance(value, str):
            problems.append(f"{name}: the value must be a string")
        elif len(value) > MAX_ENV_VALUE_CHARS:
            problems.append(f"{name}: at most {MAX_ENV_VALUE_CHARS} characters")
        elif any(unicodedata.category(c) in ("Cc", "Cs") for c in value):  # no YAML (or database) text
            problems.append(f"{name}: one line of text, without tabs or control characters")
    if problems:
        raise EnvValueError(problems)
    return {name: value for name, value in values.items()}  # a form's MultiValueDict: its last values


def declared(spec: taskfile.TaskSpec) -> dict[str, str]:
    """Every name the task declares, with its section (``envs`` or ``secrets``)."""
    names = {n: "envs" for n in (*spec.envs, *spec.required_envs)}
    names.update({n: "secrets" for n in spec.secrets})
    return names


def hidden(name: str, section: str) -> bool:
    """Whether the shown file hides this name's value (``taskfile.redacted``)."""
    return section == "secrets" or bool(taskfile.SECRET_ENV_RE.search(name))


def with_values(text: str, values: Mapping[str, str]) -> str:
    """``text`` with each value written in for its name (checked with :func:`check_values`).

    Raises ``taskfile.TaskFileError`` when the file itself has errors (the launch reports them),
    :class:`EnvValueError` naming each name the file does not declare, a hidden value too short to
    hide, or a value that cannot be written in verbatim. The result is checked: read back, it is
    the file with exactly these values set, on the same lines."""
    if not values:
        return text
    spec = taskfile.parse_task(text)  # run, a <redacted> value: the launch says (with the values in)
    names = declared(spec)
    problems = []
    for name, value in values.items():
        if name not in names:
            listed = ", ".join(sorted(names)) or "none"
            problems.append(f"{name}: the task file declares no such env or secret (it declares: {listed})")
        elif hidden(name, names[name]) and 0 < len(value) < MIN_HIDDEN_CHARS:
            problems.append(
                f"{name}: at least {MIN_HIDDEN_CHARS} characters (a shorter secret would be shown "
                "where the task file is shown)"
            )
        elif "'" in value and ('"' in value or "\\" in value):
            problems.append(f"{name}: a value may hold ' or (\" and \\), not both")
    if problems:
        raise EnvValueError(problems)
    edits = [_edit(text, names[n], n, v) for n, v in values.items()]
    out = text
    for start, end, new in sorted(edits, reverse=True):  # from the end: earlier offsets stay right
        out = out[:start] + new + out[end:]
    _check(text, out, {n: (names[n], v) for n, v in values.items()})
    return out


def _quoted(value: str) -> str:
    """A YAML scalar that reads as ``value`` and holds it verbatim (so ``redacted`` finds it)."""
    return f"'{value}'" if "'" not in value else f'"{value}"'


def _edit(text: str, section: str, name: str, value: str) -> tuple[int, int, str]:
    """(start, end, replacement) writing ``value`` for ``section.name`` in ``text``."""
    node = _value_node(text, section, name)
    if node is None:
        raise EnvValueError([f"{name}: not found as {section}.{name} in the file; write the value there"])
    key, scalar = node
    start, end = scalar.start_mark.index, scalar.end_mark.index
    if not isinstance(scalar, yaml.ScalarNode) or scalar.style in ("|", ">") or "\n" in text[start:end]:
        raise EnvValueError(
            [f"{name}: written over several lines in the file (line {key.start_mark.line + 1}); set it there"]
        )
    if start == end:  # ``NAME:`` with nothing after it: the value goes right after the colon
        colon = text.find(":", key.end_mark.index)
        if colon < 0 or text[key.end_mark.index : colon].strip():  # ``{NAME}``: no colon of its own
            raise EnvValueError(
                [f"{name}: written without a value (line {key.start_mark.line + 1}); write NAME: null"]
            )
        return colon + 1, colon + 1, " " + _quoted(value)
    return start, end, _quoted(value)


def _value_node(text: str, section: str, name: str) -> tuple[yaml.Node, yaml.Node] | None:
    """(key node, value node) of ``section.name`` in the file's node tree."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:  # parse_task read it; a reader that differs finds nothing to edit
        return None
    for key, value in _pairs(root):
        if key.value == section:
            for k, v in _pairs(value):
                if k.value == name:
                    return k, v
    return None


def _pairs(node: yaml.Node | None) -> list[tuple[yaml.Node, yaml.Node]]:
    return list(node.value) if isinstance(node, yaml.MappingNode) else []


def _check(before: str, after: str, values: dict[str, tuple[str, str]]) -> None:
    """``after`` is ``before`` with exactly these values set, on the same lines (warnings keep
    their line numbers), and still a task file."""
    expected = yaml.safe_load(before)
    for name, (section, value) in values.items():
        expected[section][name] = value
    try:
        same = yaml.safe_load(after) == expected and after.count("\n") == before.count("\n")
        taskfile.parse_task(after)
    except (yaml.YAMLError, taskfile.TaskFileError):
        same = False
    if not same:
        raise EnvValueError(
            [f"{', '.join(values)}: cannot be written into this file; write the values there"]
        )
