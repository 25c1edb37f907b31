"""Task files: what a launched cluster runs, in Srifty's YAML or SkyPilot's, unchanged.

A task file names the code and the commands; the plan option names the machines.  Both dialects
are read by :func:`parse_task` into one :class:`TaskSpec`::

    name: resnet50-imagenet           # [a-z0-9_-], at most 63 characters
    workdir: ./train                  # a local folder (uploaded as an archive, relative to the cwd) or
                                      #   git:https://github.com/org/repo.git@v1.2  (URL @ ref; quote
                                      #   it if you write a space after "git:")
    setup: pip install -r requirements.txt     # once per node
    run: |                                     # on every node
      torchrun --nnodes $NNODES --nproc-per-node $NPROC_PER_NODE --node-rank $NODE_RANK \\
        --master-addr $MASTER_ADDR --master-port $MASTER_PORT train.py --batch $SRIFTY_BATCH_PER_NODE
    envs: {DATA: s3://bucket/imagenet}
    checkpoint: {s3: s3://bucket/ckpt/resnet50, interval: auto}   # or 30m, 2h, 45 (minutes)

SkyPilot's keys are read as SkyPilot means them: ``num_nodes``, ``resources`` (``accelerators``
as ``A100:8`` or ``{A100: 8}``, ``instance_type``, ``use_spot``, ``region``, ``image_id``),
``file_mounts`` (remote path → local path or ``s3://`` URL), ``envs``, ``setup``, ``run``.  A
SkyPilot file's resources are a *request*; the plan option decides the cluster, and
:func:`plan_conflicts` names where the two disagree.

Every node gets (:func:`node_env`)::

    MASTER_ADDR, MASTER_PORT, NODE_RANK, NNODES, NPROC_PER_NODE     torchrun's names
    SRIFTY_BATCH_PER_NODE, SRIFTY_GLOBAL_BATCH                       the plan's batch split
    SKYPILOT_NODE_RANK, SKYPILOT_NODE_IPS (one per line, rank order),
    SKYPILOT_NUM_NODES, SKYPILOT_NUM_GPUS_PER_NODE                   SkyPilot's names

and the file's ``envs``, which may not redefine the node identity (a file exported by
:func:`to_skypilot` carries the two ``SRIFTY_*`` batch values; the plan's replace them).  Errors carry the line and the field
(:class:`TaskFileError`); nothing is launched from a file with errors.

A task file is read under bounds (:class:`_BoundedLoader`), checked on the composed node tree
before any Python value is built: at most ``MAX_TASK_VALUES`` values counting every alias
(``*name``) as a copy of what it names, at most ``MAX_TASK_DEPTH`` levels of nesting (aliases
expanded), and no alias inside the value it names. A 790-byte file of nested aliases stands for
billions of values; it is refused at the alias that passes the bound, naming its line.

No Django import: the CLI, the API and the launch code share this module.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

MAX_TASK_BYTES = 256 * 1024
# Values (scalars, lists, mappings) in one task file with its aliases expanded: a real task file
# has tens; 10,000 reads in milliseconds, while an alias bomb stands for billions.
MAX_TASK_VALUES = 10_000
MAX_TASK_DEPTH = 32  # levels of nesting, aliases expanded (a real task file has 4)
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
S3_RE = re.compile(r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[^\s]*)?$")
GIT_RE = re.compile(r"^(?P<url>(https://|ssh://|git@)[^\s@]+(@[^\s@/]+:[^\s@]+)?)(@(?P<ref>[^\s@]+))?$")
INTERVAL_RE = re.compile(r"^(?P<n>\d+(\.\d+)?)\s*(?P<unit>m|min|h)?$")
ACCEL_RE = re.compile(r"^(?P<gpu>[A-Za-z0-9-]+)(:(?P<n>\d+))?$")

SRIFTY_KEYS = ("name", "workdir", "setup", "run", "envs", "checkpoint")
SKYPILOT_KEYS = ("num_nodes", "resources", "file_mounts")
RESOURCE_KEYS = ("accelerators", "instance_type", "use_spot", "region", "image_id")
RESERVED_ENV = (
    "MASTER_ADDR",
    "MASTER_PORT",
    "NODE_RANK",
    "NNODES",
    "NPROC_PER_NODE",
    "SKYPILOT_NODE_RANK",
    "SKYPILOT_NODE_IPS",
    "SKYPILOT_NUM_NODES",
    "SKYPILOT_NUM_GPUS_PER_NODE",
)
DEFAULT_MASTER_PORT = 29500


@dataclass(frozen=True)
class TaskIssue:
    line: int | None  # 1-based line in the file, when known
    field: str  # dotted path, e.g. "checkpoint.interval"
    message: str

    def __str__(self) -> str:
        where = f"line {self.line}: " if self.line else ""
        return f"{where}{self.field}: {self.message}"


class TaskFileError(ValueError):
    """Every problem found in one task file (not only the first)."""

    def __init__(self, issues: list[TaskIssue]) -> None:
        super().__init__("; ".join(str(i) for i in issues))
        self.issues = issues

    def as_dict(self) -> list[dict[str, Any]]:
        return [{"line": i.line, "field": i.field, "message": i.message} for i in self.issues]


@dataclass(frozen=True)
class Workdir:
    kind: str  # "local" or "git"
    path: str = ""  # local folder, as written (relative to the task file)
    url: str = ""
    ref: str = ""


@dataclass(frozen=True)
class Checkpoint:
    s3_prefix: str
    interval_min: float | None  # None: "auto" (Young/Daly from the plan's interruption rate)

    @property
    def auto(self) -> bool:
        return self.interval_min is None


@dataclass(frozen=True)
class Resources:
    """A SkyPilot ``resources`` block: what the file asked for (the plan decides)."""

    accelerator: str = ""
    accelerator_count: int = 0
    instance_type: str = ""
    use_spot: bool | None = None
    region: str = ""
    image_id: str = ""


@dataclass(frozen=True)
class TaskSpec:
    name: str
    run: str
    setup: str = ""
    workdir: Workdir | None = None
    envs: dict[str, str] = field(default_factory=dict)
    checkpoint: Checkpoint | None = None
    num_nodes: int | None = None
    resources: Resources = field(default_factory=Resources)
    file_mounts: dict[str, str] = field(default_factory=dict)
    dialect: str = "srifty"  # "skypilot" when the file used SkyPilot-only keys

    @property
    def image_id(self) -> str:
        return self.resources.image_id


# ------------------------------------------------------------------------------------- parsing
class _TooLarge(Exception):
    """A bound of :class:`_BoundedLoader` was passed at ``mark`` (what and which bound: ``message``)."""

    def __init__(self, mark: Any, message: str) -> None:
        super().__init__(message)
        self.line = mark.line + 1 if mark is not None else None
        self.message = message


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader, composing the node tree under bounds, before anything is constructed.

    The composer shares one node between an anchor (``&a``) and its aliases (``*a``), so the tree
    stays as small as the text; what grows is every walk of the values built from it (our lines,
    validation, ``json.dumps``, the SkyPilot export). Each composed node costs 1 and each alias the
    size of the node it names, so the running total is the size of the expanded document: it is
    refused at the first node or alias that passes ``MAX_TASK_VALUES``, or that nests deeper than
    ``MAX_TASK_DEPTH`` (which also keeps the recursive composer and constructor far from Python's
    recursion limit), and an alias inside the node it names (a cycle) is refused outright.
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._values = 0  # expanded size so far
        self._depth = 0  # of the node being composed (the root is 1)
        self._reach = 0  # deepest level reached inside the node being composed, aliases expanded
        self._open: set[str] = set()  # anchors of the nodes being composed (their aliases are cycles)
        self._named: dict[str, tuple[int, int]] = {}  # anchor -> (expanded size, height)

    def _count(self, mark: Any, values: int, alias: str = "") -> None:
        self._values += values
        if self._values <= MAX_TASK_VALUES:
            return
        if alias:
            raise _TooLarge(
                mark,
                f"the alias *{alias} expands the file past {MAX_TASK_VALUES} values, a task file's "
                "limit (an alias counts as a copy of what it names)",
            )
        raise _TooLarge(mark, f"more than {MAX_TASK_VALUES} values (a task file's limit)")

    def _reached(self, mark: Any, level: int, alias: str = "") -> None:
        if level > MAX_TASK_DEPTH:
            if alias:
                raise _TooLarge(
                    mark,
                    f"the alias *{alias} nests the file deeper than {MAX_TASK_DEPTH} levels, a task file's limit",
                )
            raise _TooLarge(mark, f"nested deeper than {MAX_TASK_DEPTH} levels (a task file's limit)")
        self._reach = max(self._reach, level)

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            self._alias(event)
            return super().compose_node(parent, index)
        depth = self._depth = self._depth + 1
        self._reached(event.start_mark, depth)
        self._count(event.start_mark, 1)
        anchor, start = event.anchor, self._values
        outer_reach, self._reach = self._reach, depth
        if anchor is not None:
            self._open.add(anchor)
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if anchor is not None:
            self._open.discard(anchor)
            self._named[anchor] = (self._values - start, self._reach - depth + 1)
        self._reach = max(outer_reach, self._reach)
        return node

    def _alias(self, event: yaml.AliasEvent) -> None:
        name = event.anchor or ""
        if name in self._open:
            raise _TooLarge(
                event.start_mark, f"the alias *{name} is inside the value it names (a recursive alias)"
            )
        if name not in self._named:
            return  # the composer's own error: "found undefined alias"
        size, height = self._named[name]
        self._reached(event.start_mark, self._depth + height, name)
        self._count(event.start_mark, size, name)

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        # A scalar Python refuses (a date 2026-13-45, an integer of 5,000 digits) is a YAML error
        # at that node's line, not a ValueError escaping as a 500.
        try:
            return super().construct_object(node, deep)
        except (ValueError, TypeError, OverflowError) as exc:
            raise yaml.constructor.ConstructorError(None, None, str(exc), node.start_mark) from exc


def load_bounded(text: str) -> tuple[yaml.Node | None, Any]:
    """(node tree, value) of one YAML document read by :class:`_BoundedLoader`, or
    :class:`TaskFileError` naming the line and the bound or the YAML error. The one bounded YAML
    loader: every YAML a user sends is read through it."""
    loader = _BoundedLoader(text)
    try:  # one parse: the node tree gives the lines, the same tree gives the values
        node = loader.get_single_node()
        doc = loader.construct_document(node) if node is not None else None
    except _TooLarge as exc:
        raise TaskFileError([TaskIssue(exc.line, "file", exc.message)]) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc)
        raise TaskFileError([TaskIssue(line, "file", f"not valid YAML: {problem}")]) from None
    except RecursionError:  # the bounds above keep it away; should a loader path still recurse
        raise TaskFileError([TaskIssue(None, "file", "nested too deeply to read")]) from None
    finally:
        loader.dispose()
    return node, doc


class _Lines:
    """Line numbers of the keys of a YAML document (its composed node tree), by dotted path.

    Only the paths :class:`_Reader` can name are kept: the top-level keys and the keys of the
    sections it reads (``envs.DATA``, ``resources.accelerators``), so the paths' text is bounded
    by the file's (every path under a 200 KB unknown key would repeat it: 4,900 of them were
    950 MB). Each mapping is walked once (a visited set by identity): one reached again through an
    alias keeps the paths of its first place, and a key under an alias takes the line of the key
    that holds the alias (``of`` falls back to the parent path)."""

    def __init__(self, node: yaml.Node | None) -> None:
        self.lines: dict[str, int] = {}
        if node is not None:
            self._walk(node)

    def _walk(self, root: yaml.Node) -> None:
        seen: set[int] = set()
        todo: list[tuple[yaml.Node, str]] = [(root, "")]
        while todo:
            node, prefix = todo.pop()
            if id(node) in seen or not isinstance(node, yaml.MappingNode):
                continue
            seen.add(id(node))
            for key, value in node.value:
                if not isinstance(key, yaml.ScalarNode):
                    continue  # a list or mapping as a key: the constructor refused it already
                path = f"{prefix}.{key.value}" if prefix else str(key.value)
                self.lines[path] = key.start_mark.line + 1  # a key given twice: its last line, as its value
                if not prefix and key.value in (*SRIFTY_KEYS, *SKYPILOT_KEYS):
                    todo.append((value, path))

    def of(self, path: str) -> int | None:
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path.rpartition(".")[0]
        return None


def parse_task(text: str | bytes) -> TaskSpec:
    """Read a task file (Srifty's or SkyPilot's dialect); :class:`TaskFileError` lists every problem."""
    if isinstance(text, bytes):
        if len(text) > MAX_TASK_BYTES:
            raise TaskFileError([TaskIssue(None, "file", f"larger than {MAX_TASK_BYTES} bytes")])
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise TaskFileError([TaskIssue(None, "file", "not UTF-8 text")]) from None
    if len(text.encode()) > MAX_TASK_BYTES:
        raise TaskFileError([TaskIssue(None, "file", f"larger than {MAX_TASK_BYTES} bytes")])
    node, doc = load_bounded(text)
    if not isinstance(doc, dict):
        raise TaskFileError(
            [TaskIssue(1, "file", "must be a mapping of keys (name, workdir, setup, run, ...)")]
        )
    return _Reader(doc, _Lines(node)).read()


class _Reader:
    def __init__(self, doc: dict[str, Any], lines: _Lines) -> None:
        self.doc = doc
        self.lines = lines
        self.issues: list[TaskIssue] = []

    def bad(self, path: str, message: str) -> None:
        shown = path if len(path) <= 80 else f"{path[:77]}..."  # a 200 KB key is named, not echoed
        self.issues.append(TaskIssue(self.lines.of(path), shown, message))

    def text(self, path: str, value: Any, *, required: bool = False) -> str:
        if value is None:
            if required:
                self.bad(path, "is required")
            return ""
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            self.bad(path, "must be text")
            return ""
        return str(value)

    def read(self) -> TaskSpec:
        doc = self.doc
        allowed = (*SRIFTY_KEYS, *SKYPILOT_KEYS)
        for key in doc:
            if key not in allowed:
                self.bad(str(key), f"unknown key; allowed: {', '.join(allowed)}")
        name = self.text("name", doc.get("name"), required=True)
        if name and not NAME_RE.match(name):
            self.bad("name", "lower-case letters, digits, '-' and '_', at most 63 characters")
        run = self.text("run", doc.get("run"), required=True)
        if "run" in doc and not run.strip() and not any(i.field == "run" for i in self.issues):
            self.bad("run", "is empty")
        spec = TaskSpec(
            name=name,
            run=run,
            setup=self.text("setup", doc.get("setup")),
            workdir=self.workdir(doc.get("workdir")),
            envs=self.envs(doc.get("envs")),
            checkpoint=self.checkpoint(doc.get("checkpoint")),
            num_nodes=self.num_nodes(doc.get("num_nodes")),
            resources=self.resources(doc.get("resources")),
            file_mounts=self.file_mounts(doc.get("file_mounts")),
            dialect="skypilot" if any(k in doc for k in SKYPILOT_KEYS) else "srifty",
        )
        if self.issues:
            raise TaskFileError(self.issues)
        return spec

    def workdir(self, value: Any) -> Workdir | None:
        if value is None:
            return None
        text = self.text("workdir", value).strip()
        if not text:
            self.bad("workdir", "is empty")
            return None
        if text.startswith("git:"):
            m = GIT_RE.match(text[4:].strip())
            if not m:
                self.bad("workdir", "git: needs an https://, ssh:// or git@ URL, optionally @ref")
                return None
            return Workdir("git", url=m.group("url"), ref=m.group("ref") or "HEAD")
        if "\n" in text or "\0" in text:
            self.bad("workdir", "one folder path")
            return None
        return Workdir("local", path=text)

    def envs(self, value: Any) -> dict[str, str]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.bad("envs", "must be a mapping NAME: value")
            return {}
        out: dict[str, str] = {}
        for key, v in value.items():
            path = f"envs.{key}"
            if not isinstance(key, str) or not ENV_RE.match(key):
                self.bad(path, "names are letters, digits and '_', not starting with a digit")
            elif key in RESERVED_ENV:
                self.bad(path, "is set by Srifty from the plan; remove it")
            elif isinstance(v, (dict, list)):
                self.bad(path, "must be a single value")
            else:
                out[key] = "" if v is None else (str(v).lower() if isinstance(v, bool) else str(v))
        return out

    def checkpoint(self, value: Any) -> Checkpoint | None:
        if value is None:
            return None
        if not isinstance(value, dict):
            self.bad("checkpoint", "must be a mapping {s3: s3://bucket/prefix, interval: auto | 30m | 2h}")
            return None
        for key in value:
            if key not in ("s3", "interval"):
                self.bad(f"checkpoint.{key}", "unknown key; allowed: s3, interval")
        prefix = self.text("checkpoint.s3", value.get("s3"), required=True)
        if prefix and not S3_RE.match(prefix):
            self.bad("checkpoint.s3", "an S3 prefix like s3://bucket/path")
        interval: float | None = None
        raw = value.get("interval", "auto")
        if raw != "auto":
            m = INTERVAL_RE.match(str(raw).strip()) if not isinstance(raw, bool) else None
            if not m:
                self.bad("checkpoint.interval", "auto, or minutes: 45, 30m, 2h")
            else:
                interval = float(m.group("n")) * (60.0 if m.group("unit") == "h" else 1.0)
                if not 1 <= interval <= 7 * 24 * 60:
                    self.bad("checkpoint.interval", "between 1 minute and 7 days")
        return Checkpoint(prefix, interval)

    def num_nodes(self, value: Any) -> int | None:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            self.bad("num_nodes", "a positive whole number")
            return None
        return value

    def resources(self, value: Any) -> Resources:
        if value is None:
            return Resources()
        if not isinstance(value, dict):
            self.bad(
                "resources", "must be a mapping (accelerators, instance_type, use_spot, region, image_id)"
            )
            return Resources()
        for key in value:
            if key not in RESOURCE_KEYS:
                self.bad(f"resources.{key}", f"not supported; allowed: {', '.join(RESOURCE_KEYS)}")
        gpu, count = "", 0
        acc = value.get("accelerators")
        if isinstance(acc, dict) and len(acc) == 1:
            [(gpu, n)] = list(acc.items())
            count = n if isinstance(n, int) and not isinstance(n, bool) else -1
            gpu = str(gpu)
        elif isinstance(acc, str) and ACCEL_RE.match(acc.strip()):
            m = ACCEL_RE.match(acc.strip())
            assert m is not None
            gpu, count = m.group("gpu"), int(m.group("n") or 1)
        elif acc is not None:
            self.bad("resources.accelerators", "one accelerator: A100:8 or {A100: 8}")
        if count < 0 or (gpu and count == 0):
            self.bad("resources.accelerators", "the count must be a positive whole number")
        spot = value.get("use_spot")
        if spot is not None and not isinstance(spot, bool):
            self.bad("resources.use_spot", "true or false")
            spot = None
        image = self.text("resources.image_id", value.get("image_id"))
        if image and not re.match(r"^ami-[0-9a-f]{8,17}$", image):
            self.bad("resources.image_id", "an AMI id like ami-0123456789abcdef0")
        return Resources(
            accelerator=gpu,
            accelerator_count=max(count, 0),
            instance_type=self.text("resources.instance_type", value.get("instance_type")),
            use_spot=spot,
            region=self.text("resources.region", value.get("region")),
            image_id=image,
        )

    def file_mounts(self, value: Any) -> dict[str, str]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.bad("file_mounts", "must be a mapping /remote/path: source")
            return {}
        out: dict[str, str] = {}
        for dst, src in value.items():
            path = f"file_mounts.{dst}"
            if not isinstance(dst, str) or not (dst.startswith("/") or dst.startswith("~")):
                self.bad(path, "the remote path must be absolute (or start with ~)")
            elif not isinstance(src, str):
                self.bad(path, "the source must be a local path or an s3:// URL")
            else:
                out[dst] = src
        return out


# ------------------------------------------------------------------------------------ checks
def check_workdir(spec: TaskSpec, base: Path) -> Path | None:
    """The local workdir as a folder that exists (relative to ``base``), or :class:`TaskFileError`."""
    if spec.workdir is None or spec.workdir.kind != "local":
        return None
    folder = (base / Path(spec.workdir.path).expanduser()).resolve()
    if not folder.is_dir():
        raise TaskFileError([TaskIssue(None, "workdir", f"{folder} is not a folder")])
    return folder


def plan_conflicts(spec: TaskSpec, option: dict[str, Any]) -> list[str]:
    """Where a SkyPilot file's resource request disagrees with the plan option (warnings)."""
    notes = []
    groups = option.get("groups", [])
    types = {g["instance_type"] for g in groups}
    nodes = sum(int(g["count"]) for g in groups)
    res = spec.resources
    if spec.num_nodes is not None and spec.num_nodes != nodes:
        notes.append(f"the file asks for num_nodes {spec.num_nodes}; the plan runs {nodes}")
    if res.instance_type and types and res.instance_type not in types:
        notes.append(f"the file asks for {res.instance_type}; the plan uses {', '.join(sorted(types))}")
    if res.accelerator and groups:
        models = {str(g.get("gpu_model", "")).upper() for g in groups}
        if not any(res.accelerator.upper() in m or m in res.accelerator.upper() for m in models if m):
            notes.append(f"the file asks for {res.accelerator}; the plan uses {', '.join(sorted(models))}")
    markets = {g.get("market") for g in groups}
    if res.use_spot is not None and groups and markets != {"spot" if res.use_spot else "on-demand"}:
        notes.append(
            f"the file asks for use_spot {res.use_spot}; the plan uses {' and '.join(sorted(markets))}"
        )
    if res.region and option.get("region") and res.region != option["region"]:
        notes.append(f"the file asks for region {res.region}; the plan is in {option['region']}")
    return notes


# ------------------------------------------------------------------------ plain commands
# env names whose values are credentials: shown to nobody (the nodes get them from the rendezvous)
SECRET_ENV_RE = re.compile(
    r"TOKEN|SECRET|PASSW|PWD|KEY|CREDENTIAL|AUTH|PRIVATE|COOKIE|SESSION", re.IGNORECASE
)
REDACTED = "<redacted>"


def redacted(text: str) -> str:
    """The task file as the API and the job page show it: the value of every ``envs`` entry whose
    name looks like a credential (``HF_TOKEN``, ``WANDB_API_KEY``, ``DB_PASSWORD``) replaced by
    ``<redacted>`` wherever it appears, so a teammate who may read the job cannot read the
    owner's secrets. Values shorter than 4 characters are left (replacing them would garble the
    file, and they are no secret worth the name)."""
    if not text:
        return text
    try:
        spec = parse_task(text)
    except TaskFileError:
        return text  # a stored file was parsed at launch; nothing else can be told apart
    secrets = sorted(
        {v for k, v in spec.envs.items() if SECRET_ENV_RE.search(k) and len(v) >= 4}, key=len, reverse=True
    )
    for value in secrets:  # longest first: a value inside another is not left half-shown
        text = text.replace(value, REDACTED)
    return text


def from_command(train_command: str, name: str = "job") -> TaskSpec:
    """A job launched with a training command (``train.py --epochs 3``) and no task file: the
    task that runs it under ``torchrun`` on every node, with the node's torchrun variables. The
    words are re-quoted, so the shell on the node sees exactly the words ``shlex`` split."""
    words = shlex.split(train_command)
    if not words:
        raise TaskFileError([TaskIssue(None, "train_command", "is empty")])
    run = (
        'torchrun --nnodes "$NNODES" --nproc-per-node "$NPROC_PER_NODE" --node-rank "$NODE_RANK" '
        '--master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT" ' + shlex.join(words)
    )
    return TaskSpec(name=name, run=run)


# -------------------------------------------------------------------------------- node env
CHECKPOINT_DIR = "/opt/srifty/checkpoints"


def node_env(
    spec: TaskSpec,
    option: dict[str, Any],
    node_rank: int,
    node_ips: list[str],
    *,
    master_port: int = DEFAULT_MASTER_PORT,
    type_env: Mapping[str, Mapping[str, str]] | None = None,
) -> dict[str, str]:
    """The environment of node ``node_rank`` (0-based over the option's groups, in order).

    The one place a node's environment is made: the server answers a node's rendezvous with it
    (``launcher.launch.rendezvous``) and the node's script exports exactly this. ``type_env``:
    per instance type, the network settings (NCCL / libfabric on EFA types, NCCL's socket
    counts elsewhere; ``launcher.launch.network_env``); the file's ``envs`` may override them.
    """
    counts: list[tuple[dict[str, Any], int]] = []
    for g in option["groups"]:
        counts += [(g, i) for i in range(int(g["count"]))]
    if not 0 <= node_rank < len(counts):
        raise ValueError(f"node_rank {node_rank} outside 0..{len(counts) - 1}")
    group, index = counts[node_rank]
    batches = group.get("batch_per_node") or []
    batch = batches[index] if index < len(batches) else (batches[0] if batches else 0)
    env = dict((type_env or {}).get(group["instance_type"], {}))
    env.update(spec.envs)
    if spec.checkpoint is not None:
        env.update(SRIFTY_CHECKPOINT_DIR=CHECKPOINT_DIR, SRIFTY_CHECKPOINT_S3=spec.checkpoint.s3_prefix)
    env.update(
        MASTER_ADDR=node_ips[0] if node_ips else "127.0.0.1",
        MASTER_PORT=str(master_port),
        NODE_RANK=str(node_rank),
        NNODES=str(len(counts)),
        NPROC_PER_NODE=str(group["gpus_per_node"]),
        SRIFTY_BATCH_PER_NODE=str(batch),
        SRIFTY_PER_NODE_BATCH=str(batch),  # the name scripts written for train_command jobs read
        SRIFTY_NNODES=str(len(counts)),
        SRIFTY_NODE_RANK=str(node_rank),
        SRIFTY_GLOBAL_BATCH=str(option.get("global_batch", "")),
        SKYPILOT_NODE_RANK=str(node_rank),
        SKYPILOT_NODE_IPS="\n".join(node_ips),
        SKYPILOT_NUM_NODES=str(len(counts)),
        SKYPILOT_NUM_GPUS_PER_NODE=str(group["gpus_per_node"]),
    )
    return env


# ------------------------------------------------------------------------------ sky export
def to_skypilot(option: dict[str, Any], spec: TaskSpec | None = None) -> list[tuple[str, str]]:
    """The plan option as SkyPilot task files ``[(filename, yaml)]``: one per instance type.

    SkyPilot launches one instance type per cluster, so a mixed plan becomes one file per type
    with a note at the top; the per-node batch of each type is in ``SRIFTY_BATCH_PER_NODE``.
    """
    groups = option["groups"]
    by_type: dict[str, list[dict[str, Any]]] = {}
    for g in groups:
        by_type.setdefault(g["instance_type"], []).append(g)
    total = sum(int(g["count"]) for g in groups)
    files = []
    base = spec.name if spec else f"srifty-plan-option-{option.get('rank', 1)}"
    for itype, gs in by_type.items():
        nodes = sum(int(g["count"]) for g in gs)
        spot = any(g.get("market") == "spot" for g in gs)
        batch = (gs[0].get("batch_per_node") or [0])[0]
        doc: dict[str, Any] = {"name": base if len(by_type) == 1 else f"{base}-{itype.replace('.', '-')}"}
        if spec and spec.workdir and spec.workdir.kind == "local":
            doc["workdir"] = spec.workdir.path
        doc["num_nodes"] = nodes
        resources: dict[str, Any] = {
            "instance_type": itype,
            "accelerators": f"{gs[0].get('gpu_model', 'GPU')}:{gs[0]['gpus_per_node']}",
            "use_spot": spot,
            "region": option.get("region", ""),
        }
        if spec and spec.image_id:
            resources["image_id"] = spec.image_id
        doc["resources"] = resources
        envs = dict(spec.envs) if spec else {}
        envs["SRIFTY_BATCH_PER_NODE"] = str(batch)
        envs["SRIFTY_GLOBAL_BATCH"] = str(option.get("global_batch", ""))
        doc["envs"] = envs
        if spec and spec.file_mounts:
            doc["file_mounts"] = dict(spec.file_mounts)
        if spec and spec.setup:
            doc["setup"] = spec.setup
        doc["run"] = (
            spec.run
            if spec
            else "torchrun --nnodes $SKYPILOT_NUM_NODES --nproc-per-node $SKYPILOT_NUM_GPUS_PER_NODE \\\n"
            '  --node-rank $SKYPILOT_NODE_RANK --master-addr $(echo "$SKYPILOT_NODE_IPS" | head -n1) \\\n'
            "  --master-port 29500 train.py --batch $SRIFTY_BATCH_PER_NODE\n"
        )
        header = f"# Srifty plan option {option.get('rank', '?')}: {nodes} x {itype} ({'spot' if spot else 'on-demand'})"
        header += f" in {option.get('region', '?')}.\n"
        if len(by_type) > 1:
            header += (
                f"# NOTE: this plan mixes {len(by_type)} instance types ({', '.join(by_type)}; {total} nodes in all).\n"
                "# SkyPilot runs one type per cluster: launch these files as separate clusters only if your\n"
                "# training code joins them (e.g. one torchrun rendezvous); otherwise launch with Srifty.\n"
            )
        files.append((f"{doc['name']}.sky.yaml", header + yaml.safe_dump(doc, sort_keys=False)))
    return files
