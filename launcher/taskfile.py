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

SkyPilot's keys are read as SkyPilot 0.14 means them, for everything that means something on
AWS: ``name`` is optional (default: the file's stem, normalised; a name with capitals or dots is
read lower-cased); ``num_nodes``; ``resources`` with ``accelerators`` (``A100:8``, a map
``{A100: 8, H100: 8}``, a list or a set: alternatives), ``instance_type``, ``use_spot``,
``infra: aws[/REGION[/ZONE]]`` or ``cloud: aws``/``region``/``zone``, ``cpus`` and ``memory``
(``N`` or ``N+``), ``disk_size``, ``disk_tier``, ``ports``, ``network_tier`` (``best``: EFA),
``labels``, ``image_id`` (an AMI, a map region → AMI, or ``docker:IMAGE``), ``job_recovery``,
and ``any_of``/``ordered`` (alternatives, each over the block's other keys); ``file_mounts``
(remote path → local path or ``s3://`` URL, or a bucket ``{name, source, store: s3, mode}``);
``envs`` (a ``null`` value must be given at launch: :attr:`TaskSpec.required_envs`);
``secrets`` (never among the parsed ``envs``; redacted wherever the file is shown); ``setup``;
``run``. A SkyPilot file's resources are a *request*; the plan option decides the cluster, and
:func:`plan_conflicts` names where the two disagree. What is read but not acted on yet
(``NOT_HONOURED``, and SkyPilot keys such as ``config`` or ``service``) is kept in the
:class:`TaskSpec` and named, with its line, in :attr:`TaskSpec.warnings`. A file that pins
another cloud (``infra: gcp``, ``cloud: azure``, ``infra: k8s``, a ``gs://`` bucket, a TPU) is
refused with one message: "Srifty plans and launches on AWS only: ...".

Every node gets (:func:`node_env`)::

    MASTER_ADDR, MASTER_PORT, NODE_RANK, NNODES, NPROC_PER_NODE     torchrun's names
    SRIFTY_BATCH_PER_NODE, SRIFTY_GLOBAL_BATCH                       the plan's batch split
    SKYPILOT_NODE_RANK, SKYPILOT_NODE_IPS (one per line, rank order),
    SKYPILOT_NUM_NODES, SKYPILOT_NUM_GPUS_PER_NODE                   SkyPilot's names

and the file's ``envs``, which may not redefine the node identity (a file exported by
:func:`to_skypilot` carries the plan's ``SRIFTY_*`` batch and checkpoint values; the plan's replace them).  Errors carry the line and the field
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
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from planner.option import NodeGroup, PlanOption

MAX_TASK_BYTES = 256 * 1024
# Values (scalars, lists, mappings) in one task file with its aliases expanded: a real task file
# has tens; 10,000 reads in milliseconds, while an alias bomb stands for billions.
MAX_TASK_VALUES = 10_000
ZONE_REGION_RE = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d+")  # the region a zone name starts with
MAX_CHOICES = 64  # any_of/ordered entries, and accelerator alternatives: each is a filter a plan runs
MAX_AMOUNT = 1e6  # cpus, GiB of memory or disk: far above any instance, and finite (``.inf``)
MAX_TASK_DEPTH = 32  # levels of nesting, aliases expanded (a real task file has 4)
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
S3_RE = re.compile(r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[^\s]*)?$")
GIT_RE = re.compile(r"^(?P<url>(https://|ssh://|git@)[^\s@]+(@[^\s@/]+:[^\s@]+)?)(@(?P<ref>[^\s@]+))?$")
INTERVAL_RE = re.compile(r"^(?P<n>\d+(\.\d+)?)\s*(?P<unit>m|min|h)?$")
ACCEL_RE = re.compile(r"^(?P<gpu>[A-Za-z0-9-]+)(:(?P<n>\d+))?$")

AMI_RE = re.compile(r"^ami-[0-9a-f]{8,17}$")
AMOUNT_RE = re.compile(r"^(?P<n>\d+(\.\d+)?)\s*(?P<unit>GB|G|GiB|TB|T|TiB)?\s*(?P<plus>\+)?$", re.IGNORECASE)
PORT_RE = re.compile(r"^(?P<a>\d{1,5})(-(?P<b>\d{1,5}))?$")
LOOSE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")  # SkyPilot's names: capitals, dots

SRIFTY_KEYS = ("name", "workdir", "setup", "run", "envs", "checkpoint")
SKYPILOT_KEYS = ("num_nodes", "resources", "file_mounts", "secrets")
# SkyPilot 0.14 top-level keys that mean something Srifty does not do (yet): kept raw, warned.
SKYPILOT_KEPT_KEYS = (
    "config",
    "service",
    "volumes",
    "event_callback",
    "inputs",
    "outputs",
    "pool",
    "experimental",
)
RESOURCE_KEYS = (
    "accelerators",
    "instance_type",
    "use_spot",
    "region",
    "zone",
    "cloud",
    "infra",
    "image_id",
    "cpus",
    "memory",
    "disk_size",
    "disk_tier",
    "ports",
    "network_tier",
    "labels",
    "job_recovery",
    "spot_recovery",  # SkyPilot's older name of job_recovery
    "any_of",
    "ordered",
)
RESOURCE_KEPT_KEYS = ("accelerator_args", "autostop", "priority", "volumes")
DISK_TIERS = ("low", "medium", "high", "ultra", "best")
NETWORK_TIERS = ("standard", "best")
MOUNT_MODES = ("MOUNT", "COPY", "MOUNT_CACHED")
# Clouds and stores SkyPilot knows besides AWS: a file that pins one is refused (AWS only).
OTHER_CLOUD_SCHEMES = {
    "gs://": "gcp",
    "r2://": "cloudflare",
    "cos://": "ibm",
    "oci://": "oci",
    "nebius://": "nebius",
}
# What the file asks that Srifty reads and keeps but does not act on everywhere (the warning's
# text, by key). cpus, memory and network_tier are constraints of a plan made from the file
# (planner.app.task_constraints), not of a launch of an option planned without it.
NOT_HONOURED = {
    "resources.cpus": "a minimum: a plan made from this file ranks only types with that many vCPUs; launching another plan's option does not check it",
    "resources.memory": "a minimum: a plan made from this file ranks only types with that much memory; launching another plan's option does not check it",
    "resources.disk_size": "kept; Srifty's nodes get the AMI's root volume size",
    "resources.disk_tier": "kept; Srifty's nodes get the AMI's root volume type",
    "resources.ports": "kept; Srifty opens ports between the cluster's nodes only",
    "resources.network_tier": "best: a plan made from this file ranks only EFA types; launching another plan's option does not check it",
    "resources.labels": "kept; Srifty does not tag the instances with them",
    "resources.job_recovery": "kept; Srifty's spot policy decides how an interrupted job resumes",
    "resources.zone": "kept; the plan picks the zone (the cheapest one that has capacity)",
    "resources.ordered": "kept as alternatives; the plan ranks them by job cost, not in the file's order",
    "resources.image_id": "a Docker image is kept; Srifty runs the task on the AMI, not in a container",
    "file_mounts": "kept in the SkyPilot export; Srifty's launch does not copy or mount it",
}
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
RUN_MISSING = (
    "is needed to launch: the command every node runs (a task file without run can be planned "
    "from, as its resources are the plan's constraints, but not launched)"
)


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
class Amount:
    """``cpus: 8`` (exactly 8, SkyPilot's meaning) or ``cpus: 8+`` (8 or more); memory in GiB."""

    value: float
    or_more: bool

    @property
    def minimum(self) -> float:
        return self.value  # both forms ask for at least ``value``; "8" also asks for at most 8

    def __str__(self) -> str:
        return f"{self.value:g}{'+' if self.or_more else ''}"


@dataclass(frozen=True)
class BucketMount:
    """A ``file_mounts`` entry that is a bucket: ``/out: {name: b, source: ./x, store: s3, mode: MOUNT}``."""

    path: str  # where it appears on the node
    name: str = ""  # the bucket (created by SkyPilot when ``source`` is a local folder)
    source: str | tuple[str, ...] = ""  # a local folder, an s3:// URL, or several local folders
    store: str = "s3"
    mode: str = "MOUNT"  # MOUNT, COPY or MOUNT_CACHED
    persistent: bool = True


@dataclass(frozen=True)
class Resources:
    """A SkyPilot ``resources`` block: what the file asked for (the plan decides).

    ``accelerators`` lists the alternatives ``(name, count)`` (``{A100: 8, H100: 8}``, a list or a
    set); ``accelerator``/``accelerator_count`` are the first. ``alternatives`` are the
    ``any_of``/``ordered`` entries (each with the block's other keys as defaults), AWS's only;
    :attr:`choices` is what a plan may pick from. ``extras``: the raw values of the keys read
    but not acted on, warned about in :attr:`TaskSpec.warnings`.
    """

    accelerator: str = ""
    accelerator_count: int = 0
    instance_type: str = ""
    use_spot: bool | None = None
    region: str = ""
    image_id: str = ""  # one AMI (a per-region map is ``image_ids``)
    accelerators: tuple[tuple[str, int], ...] = ()
    zone: str = ""
    cpus: Amount | None = None
    memory: Amount | None = None  # GiB
    disk_size: int | None = None  # GiB
    disk_tier: str = ""
    ports: tuple[str, ...] = ()
    network_tier: str = ""  # "best": EFA
    labels: dict[str, str] = field(default_factory=dict)
    image_ids: dict[str, str] = field(default_factory=dict)  # region -> AMI
    docker_image: str = ""  # image_id: docker:<image>
    job_recovery: Any = None  # as written: a strategy name or {strategy, max_restarts_on_errors}
    alternatives: tuple[Resources, ...] = ()
    ordered: bool = False  # ``ordered`` (a preference) rather than ``any_of``
    extras: dict[str, Any] = field(default_factory=dict)

    @property
    def efa(self) -> bool:
        return self.network_tier == "best"

    @property
    def choices(self) -> tuple[Resources, ...]:
        return self.alternatives or (self,)

    def image_for(self, region: str) -> str:
        """The AMI this file asks for in ``region`` ("" : the Deep Learning AMI)."""
        return self.image_ids.get(region, "") if self.image_ids else self.image_id


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
    bucket_mounts: dict[str, BucketMount] = field(default_factory=dict)
    secrets: tuple[str, ...] = ()  # names of ``secrets`` (values: ``secret_values`` or at launch)
    secret_values: dict[str, str] = field(default_factory=dict, repr=False)
    required_envs: tuple[str, ...] = ()  # ``envs``/``secrets`` written ``null``: given at launch
    warnings: tuple[TaskIssue, ...] = ()  # what is read and kept but not acted on, by line
    extras: dict[str, Any] = field(default_factory=dict)  # top-level keys kept raw (``config``, ...)

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
        # types-PyYAML leaves the parser's methods untyped.
        event = self.peek_event()  # type: ignore[no-untyped-call]
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


def parse_task(
    text: str | bytes, filename: str | Path | None = None, *, for_launch: bool = False
) -> TaskSpec:
    """Read a task file (Srifty's or SkyPilot's dialect); :class:`TaskFileError` lists every problem.

    ``filename``: where the text came from; a file without ``name`` is named after its stem
    (:func:`name_from_filename`), as SkyPilot does, else ``task``. ``run`` is optional, as in
    SkyPilot (a file of resources plans); ``for_launch``: a file without one is refused, the
    problem listed with the others (:data:`RUN_MISSING`)."""
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
    default = name_from_filename(filename) if filename else "task"
    return _Reader(doc, _Lines(node), default, for_launch=for_launch).read()


def name_from_filename(filename: str | Path) -> str:
    """The file's stem as a task name: lower case, every run of other characters than
    ``[a-z0-9_-]`` one ``-``, starting with a letter or digit, at most 63 characters
    (``minGPT DDP.yaml`` -> ``mingpt-ddp``); ``task`` when nothing is left."""
    stem = Path(str(filename)).name
    for suffix in (".yaml", ".yml"):
        stem = stem.removesuffix(suffix)
    return _normalised(stem.removesuffix(".sky")) or "task"


def _normalised(name: str) -> str:
    out = re.sub(r"[^a-z0-9_-]+", "-", name.lower())
    return re.sub(r"^[^a-z0-9]+", "", out)[:63].rstrip("-_")


class _Reader:
    def __init__(
        self, doc: dict[str, Any], lines: _Lines, default_name: str = "task", *, for_launch: bool = False
    ) -> None:
        self.doc = doc
        self.for_launch = for_launch
        self.lines = lines
        self.default_name = default_name
        self.issues: list[TaskIssue] = []
        self.warnings: list[TaskIssue] = []
        # where the file names another cloud: (path, line, "resources.cloud: gcp (line 5)")
        self.pins: list[tuple[str, int | None, str]] = []

    def bad(self, path: str, message: str) -> None:
        self.issues.append(TaskIssue(self.lines.of(path), _shown(path), message))

    def warn(self, path: str, message: str) -> None:
        self.warnings.append(TaskIssue(self.lines.of(path), _shown(path), message))

    def pin(self, path: str, what: str) -> None:
        line = self.lines.of(path)
        said = f"{_shown(path)}: {_shown(what)}" + (f" (line {line})" if line else "")
        self.pins.append((_shown(path), line, said))

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
        allowed = (*SRIFTY_KEYS, *SKYPILOT_KEYS, *SKYPILOT_KEPT_KEYS)
        extras: dict[str, Any] = {}
        for key in doc:
            if key in SKYPILOT_KEPT_KEYS:
                extras[key] = doc[key]
                self.warn(key, "a SkyPilot key Srifty does not act on; kept as written")
            elif key not in allowed:
                self.bad(str(key), f"unknown key; allowed: {', '.join(allowed)}")
        name = self.name(doc.get("name"))
        # SkyPilot's ``run`` is optional (a task that only provisions): such a file plans (its
        # resources are the constraints); the launch refuses it (:func:`launch_issues`)
        run = self.text("run", doc.get("run"))
        if self.for_launch and not run.strip() and not any(i.field == "run" for i in self.issues):
            self.bad("run", RUN_MISSING)
        envs, required = self.envs(doc.get("envs"))
        secrets, secret_values, unset = self.secrets(doc.get("secrets"), envs, required)
        if self.for_launch:  # a file copied from where it is shown: "<redacted>" is no value to run with
            for section, values in (("envs", envs), ("secrets", secret_values)):
                for key in [k for k, v in values.items() if v == REDACTED]:
                    self.bad(f"{section}.{key}", f"is {REDACTED} (the file as shown): give its value")
        file_mounts, buckets = self.file_mounts(doc.get("file_mounts"))
        spec = TaskSpec(
            name=name,
            run=run,
            setup=self.text("setup", doc.get("setup")),
            workdir=self.workdir(doc.get("workdir")),
            envs=envs,
            checkpoint=self.checkpoint(doc.get("checkpoint")),
            num_nodes=self.num_nodes(doc.get("num_nodes")),
            resources=self.resources(doc.get("resources")),
            file_mounts=file_mounts,
            dialect="skypilot" if any(k in doc for k in (*SKYPILOT_KEYS, *SKYPILOT_KEPT_KEYS)) else "srifty",
            bucket_mounts=buckets,
            secrets=secrets,
            secret_values=secret_values,
            required_envs=(*required, *unset),
            warnings=(),
            extras=extras,
        )
        if self.pins:  # one message: nothing else in the file matters while it names another cloud
            path, line, _ = self.pins[0]
            said = "; ".join(p[2] for p in self.pins)
            raise TaskFileError([TaskIssue(line, path, f"Srifty plans and launches on AWS only: {said}")])
        if self.issues:
            raise TaskFileError(self.issues)
        return replace(spec, warnings=tuple(sorted(self.warnings, key=lambda w: (w.line or 0, w.field))))

    def name(self, value: Any) -> str:
        """SkyPilot's ``name`` is optional and may hold capitals and dots; Srifty's is
        ``[a-z0-9_-]``: a SkyPilot-style name is read normalised (with a warning), others refused."""
        if value is None:
            return self.default_name
        name = self.text("name", value)
        if not name or NAME_RE.match(name):
            return name
        if LOOSE_NAME_RE.match(name) and _normalised(name):
            self.warn("name", f"read as {_normalised(name)} (lower-case letters, digits, '-' and '_')")
            return _normalised(name)
        self.bad("name", "lower-case letters, digits, '-' and '_', at most 63 characters")
        return name

    def workdir(self, value: Any) -> Workdir | None:
        if value is None:
            return None
        if isinstance(value, dict):  # SkyPilot 0.14: workdir: {url: https://..., ref: v1.2}
            for key in value:
                if key not in ("url", "ref"):
                    self.bad(f"workdir.{key}", "unknown key; allowed: url, ref")
            url = self.text("workdir.url", value.get("url"), required=True).strip()
            ref = self.text("workdir.ref", value.get("ref")).strip()
            m = GIT_RE.match(url) if url else None
            if url and (not m or m.group("ref")):
                self.bad("workdir.url", "an https://, ssh:// or git@ URL of a git repository")
                return None
            return Workdir("git", url=url, ref=ref or "HEAD") if url else None
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

    def env_name(self, section: str, key: Any) -> bool:
        path = f"{section}.{key}"
        if not isinstance(key, str) or not ENV_RE.match(key):
            self.bad(path, "names are letters, digits and '_', not starting with a digit")
        elif key in RESERVED_ENV:
            self.bad(path, "is set by Srifty from the plan; remove it")
        else:
            return True
        return False

    def env_values(self, section: str, value: Any) -> tuple[dict[str, str], list[str]]:
        """(values, names written ``null``) of ``envs`` or ``secrets``."""
        if value is None:
            return {}, []
        if not isinstance(value, dict):
            self.bad(section, "must be a mapping NAME: value")
            return {}, []
        out: dict[str, str] = {}
        unset: list[str] = []
        for key, v in value.items():
            if not self.env_name(section, key):
                continue
            if isinstance(v, (dict, list)):
                self.bad(f"{section}.{key}", "must be a single value")
            elif v is None:  # SkyPilot: "must be given at launch" (--env / --secret), not ""
                unset.append(key)
            else:
                out[key] = str(v).lower() if isinstance(v, bool) else str(v)
        return out, unset

    def envs(self, value: Any) -> tuple[dict[str, str], list[str]]:
        return self.env_values("envs", value)

    def secrets(
        self, value: Any, envs: dict[str, str], required: list[str]
    ) -> tuple[tuple[str, ...], dict[str, str], list[str]]:
        """(names, values written in the file, names written ``null``). A secret is never one of
        the parsed ``envs``: its value is shown to nobody (:func:`redacted`)."""
        values, unset = self.env_values("secrets", value)
        names = (*values, *unset)
        for key in names:
            if key in envs or key in required:
                self.bad(f"secrets.{key}", "is also in envs; a name is an env or a secret, not both")
        return tuple(names), values, unset

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
        """The ``resources`` block. ``any_of``/``ordered`` entries take the block's other keys as
        defaults (SkyPilot's meaning); an entry on another cloud is dropped with a warning while
        one on AWS is left, and the file is refused (AWS only) when none is."""
        if value is None:
            return Resources()
        if not isinstance(value, dict):
            self.bad("resources", "must be a mapping (accelerators, instance_type, use_spot, region, ...)")
            return Resources()
        lists = [k for k in ("any_of", "ordered") if k in value]
        base = {k: v for k, v in value.items() if k not in lists}
        pins = len(self.pins)
        top = self.resource_block("resources", base)
        if top is not None:
            self.warn_unhonoured("resources", base)
        if not lists:
            return top or Resources()
        if len(lists) > 1:
            self.bad("resources.ordered", "any_of or ordered, not both")
        key = lists[0]
        entries = value[key]
        if not isinstance(entries, list) or not entries or not all(isinstance(e, dict) for e in entries):
            self.bad(f"resources.{key}", "a list of resource mappings (accelerators, region, ...)")
            return top or Resources()
        if len(entries) > MAX_CHOICES:  # every offer a plan weighs is checked against each one
            self.bad(f"resources.{key}", f"at most {MAX_CHOICES} entries")
            return top or Resources()
        choices: list[Resources] = []
        for i, entry in enumerate(entries):
            path = f"resources.{key}"
            for inner in ("any_of", "ordered"):
                if inner in entry:
                    self.bad(path, f"an entry of {key} cannot hold {inner}")
            before = len(self.pins)
            choice = self.resource_block(path, entry)
            if choice is not None:
                choices.append(_merged(top or Resources(), choice, entry))
                self.warn_unhonoured(path, entry)
            elif len(self.pins) > before:
                dropped = self.pins[before:]
                del self.pins[before:]
                said = "; ".join(p[2] for p in dropped)
                self.warn(path, f"entry {i + 1} is not on AWS ({said}); left out")
        if not choices and len(self.pins) == pins:
            self.pin(f"resources.{key}", "no entry on AWS")
        if key == "ordered":
            self.warn("resources.ordered", NOT_HONOURED["resources.ordered"])
        first = choices[0] if choices else (top or Resources())
        return replace(first, alternatives=tuple(choices), ordered=key == "ordered")

    def resource_block(self, path: str, value: dict[str, Any]) -> Resources | None:
        """One set of resources (the block, or one ``any_of`` entry, read alone and then laid
        over the block's by :func:`_merged`); None when it names another cloud (recorded in
        ``self.pins``)."""
        for key in value:
            if key in RESOURCE_KEPT_KEYS:
                self.warn(f"{path}.{key}", "a SkyPilot key Srifty does not act on; kept as written")
            elif key not in RESOURCE_KEYS:
                self.bad(
                    f"{path}.{key}",
                    f"not supported; allowed: {', '.join((*RESOURCE_KEYS, *RESOURCE_KEPT_KEYS))}",
                )
        pins = len(self.pins)
        region, zone = self.place(path, value)
        accelerators = self.accelerators(f"{path}.accelerators", value.get("accelerators"))
        if len(self.pins) > pins:
            return None
        spot = value.get("use_spot")
        if spot is not None and not isinstance(spot, bool):
            self.bad(f"{path}.use_spot", "true or false")
            spot = None
        image, images, docker = self.image(f"{path}.image_id", value.get("image_id"))
        kept = {k: value[k] for k in RESOURCE_KEPT_KEYS if k in value}
        recovery = value.get("job_recovery", value.get("spot_recovery"))
        if recovery is not None and not isinstance(recovery, (str, dict)):
            self.bad(f"{path}.job_recovery", "a strategy (FAILOVER, EAGER_NEXT_REGION) or a mapping")
        first = accelerators[0] if accelerators else ("", 0)
        res = Resources(
            accelerator=first[0],
            accelerator_count=first[1],
            instance_type=self.text(f"{path}.instance_type", value.get("instance_type")),
            use_spot=spot,
            region=region,
            image_id=image,
            accelerators=accelerators,
            zone=zone,
            cpus=self.amount(f"{path}.cpus", value.get("cpus")),
            memory=self.amount(f"{path}.memory", value.get("memory")),
            disk_size=self.disk_size(f"{path}.disk_size", value.get("disk_size")),
            disk_tier=self.choice(f"{path}.disk_tier", value.get("disk_tier"), DISK_TIERS),
            ports=self.ports(f"{path}.ports", value.get("ports")),
            network_tier=self.choice(f"{path}.network_tier", value.get("network_tier"), NETWORK_TIERS),
            labels=self.labels(f"{path}.labels", value.get("labels")),
            image_ids=images,
            docker_image=docker,
            job_recovery=recovery,
            extras=kept,
        )
        return res

    def warn_unhonoured(self, path: str, value: dict[str, Any]) -> None:
        """A warning per key of ``value`` (a block or one list entry) read but not acted on."""
        for key in ("cpus", "memory", "disk_size", "disk_tier", "ports", "network_tier", "labels", "zone"):
            if key in value:
                self.warn(f"{path}.{key}", NOT_HONOURED[f"resources.{key}"])
        for key in ("job_recovery", "spot_recovery"):
            if key in value:
                self.warn(f"{path}.{key}", NOT_HONOURED["resources.job_recovery"])
        if isinstance(value.get("image_id"), str) and value["image_id"].strip().startswith("docker:"):
            self.warn(f"{path}.image_id", NOT_HONOURED["resources.image_id"])
        if isinstance(value.get("infra"), str) and value["infra"].count("/") >= 2:
            self.warn(f"{path}.infra", NOT_HONOURED["resources.zone"])

    def place(self, path: str, value: dict[str, Any]) -> tuple[str, str]:
        """(region, zone) from ``infra: aws/REGION/ZONE`` or ``cloud``/``region``/``zone``; a
        cloud other than AWS is a pin. ``*`` in ``infra`` is any region."""
        infra = value.get("infra")
        cloud = self.text(f"{path}.cloud", value.get("cloud")).strip().lower()
        region = self.text(f"{path}.region", value.get("region")).strip()
        zone = self.text(f"{path}.zone", value.get("zone")).strip()
        if cloud and cloud != "aws":
            self.pin(f"{path}.cloud", cloud)
        if infra is not None:
            parts = self.text(f"{path}.infra", infra).strip().split("/")
            where = parts[0].lower()
            if where in ("k8s", "kubernetes") or (where and where not in ("aws", "*")):
                self.pin(f"{path}.infra", "/".join(parts))
                return "", ""
            if cloud or region or zone:
                self.bad(f"{path}.infra", "infra, or cloud/region/zone, not both")
            if len(parts) > 3:
                self.bad(f"{path}.infra", "aws, aws/REGION or aws/REGION/ZONE")
            region = parts[1] if len(parts) > 1 and parts[1] != "*" else ""
            zone = parts[2] if len(parts) > 2 and parts[2] != "*" else ""
        if zone and region and not zone.startswith(region):
            self.bad(f"{path}.zone", f"{_shown(zone)} is not a zone of {_shown(region)}")
        if zone and not region:
            # us-east-2a -> us-east-2, a Local Zone us-east-1-bos-1a -> us-east-1: the region leads
            region = m.group(0) if (m := ZONE_REGION_RE.match(zone)) else zone[:-1]
        return region, zone

    def accelerators(self, path: str, value: Any) -> tuple[tuple[str, int], ...]:
        """``A100:8``, ``A100`` (one), ``{A100: 8, H100: 8}``, ``[A100:8, H100:8]`` or the set
        ``{A100:8, H100:8}`` (YAML's mapping to nulls): the alternatives, in the file's order."""
        if value is None:
            return ()
        items: list[tuple[Any, Any]]
        if isinstance(value, str):
            items = [(value, None)]
        elif isinstance(value, dict) and value:
            items = list(value.items())
        elif isinstance(value, list) and value:
            items = [(v, None) for v in value]
        else:
            items = []
        if len(items) > MAX_CHOICES:
            self.bad(path, f"at most {MAX_CHOICES} alternatives")
            return ()
        out: list[tuple[str, int]] = []
        for raw, n in items:
            got = self.accelerator(path, raw, n)
            if got is None:
                self.bad(path, "A100:8, {A100: 8, H100: 8} or a list [A100:8, H100:8]")
                return ()
            if got[0].lower().startswith("tpu"):
                self.pin(path, f"{got[0]} (a Google TPU)")
            if got[1] < 1:
                self.bad(path, "the count must be a positive whole number")
            out.append(got)
        return tuple(out)

    @staticmethod
    def accelerator(path: str, raw: Any, n: Any) -> tuple[str, int] | None:
        if not isinstance(raw, str) or not ACCEL_RE.match(raw.strip()):
            return None
        m = ACCEL_RE.match(raw.strip())
        assert m is not None
        if n is not None:
            if m.group("n"):
                return None  # {A100:8: 2}
            ok = isinstance(n, int) and not isinstance(n, bool)
            return m.group("gpu"), n if ok else -1
        return m.group("gpu"), int(m.group("n") or 1)

    def image(self, path: str, value: Any) -> tuple[str, dict[str, str], str]:
        """(AMI, per-region AMIs, Docker image) of ``image_id``."""
        if value is None:
            return "", {}, ""
        if isinstance(value, dict):
            images: dict[str, str] = {}
            for region, ami in value.items():
                text = self.text(path, ami)
                if not isinstance(region, str) or not AMI_RE.match(text):
                    self.bad(path, "per region an AMI id: {us-east-1: ami-0123456789abcdef0, ...}")
                    return "", {}, ""
                images[region] = text
            return "", images, ""
        text = self.text(path, value).strip()
        if text.startswith("docker:") and len(text) > len("docker:"):
            return "", {}, text.removeprefix("docker:")
        if text and not AMI_RE.match(text):
            self.bad(path, "an AMI id like ami-0123456789abcdef0, a map region: AMI, or docker:IMAGE")
            return "", {}, ""
        return text, {}, ""

    def amount(self, path: str, value: Any) -> Amount | None:
        """``8``, ``8+``, ``32GB+`` (memory in GiB; TB is 1024)."""
        if value is None:
            return None
        if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value <= MAX_AMOUNT:
            return Amount(float(value), False)
        m = AMOUNT_RE.match(value.strip()) if isinstance(value, str) else None
        scale = 1024.0 if m and (m.group("unit") or "").upper().startswith("T") else 1.0
        if not m or not 0 < float(m.group("n")) * scale <= MAX_AMOUNT:  # YAML's .inf is no amount
            self.bad(path, f"a positive number up to {MAX_AMOUNT:g}, or N+ for N or more (e.g. 8+)")
            return None
        return Amount(float(m.group("n")) * scale, bool(m.group("plus")))

    def disk_size(self, path: str, value: Any) -> int | None:
        if value is None:
            return None
        amount = self.amount(path, value)
        if amount is None or amount.or_more or amount.value != int(amount.value) or amount.value > 65536:
            if amount is not None:
                self.bad(path, "whole GiB, at most 65536")
            return None
        return int(amount.value)

    def choice(self, path: str, value: Any, allowed: tuple[str, ...]) -> str:
        text = self.text(path, value).strip().lower()
        if text and text not in allowed:
            self.bad(path, f"one of {', '.join(allowed)}")
            return ""
        return text

    def ports(self, path: str, value: Any) -> tuple[str, ...]:
        """``8080``, ``"10000-10010"`` or a list of them."""
        if value is None:
            return ()
        out = []
        for item in value if isinstance(value, list) else [value]:
            m = PORT_RE.match(str(item).strip()) if not isinstance(item, (bool, dict, list)) else None
            a, b = (int(m.group("a")), int(m.group("b") or m.group("a"))) if m else (0, 0)
            if not m or not 1 <= a <= b <= 65535:
                self.bad(path, "a port (8080), a range (10000-10010) or a list of them")
                return ()
            out.append(str(item).strip())
        return tuple(out)

    def labels(self, path: str, value: Any) -> dict[str, str]:
        if value is None:
            return {}
        if not isinstance(value, dict) or any(
            not isinstance(k, str) or isinstance(v, (dict, list)) for k, v in value.items()
        ):
            self.bad(path, "a mapping key: value")
            return {}
        return {k: "" if v is None else str(v) for k, v in value.items()}

    def file_mounts(self, value: Any) -> tuple[dict[str, str], dict[str, BucketMount]]:
        """(path -> local path or s3:// URL, path -> bucket mount); a bucket of another cloud
        (``gs://``, ``store: gcs``) is a pin."""
        if value is None:
            return {}, {}
        if not isinstance(value, dict):
            self.bad("file_mounts", "must be a mapping /remote/path: source")
            return {}, {}
        out: dict[str, str] = {}
        buckets: dict[str, BucketMount] = {}
        for dst, src in value.items():
            path = f"file_mounts.{dst}"
            if not isinstance(dst, str) or not (dst.startswith("/") or dst.startswith("~")):
                self.bad(path, "the remote path must be absolute (or start with ~)")
            elif isinstance(src, dict):
                bucket = self.bucket(path, dst, src)
                if bucket is not None:
                    buckets[dst] = bucket
            elif not isinstance(src, str):
                self.bad(
                    path, "the source must be a local path, an s3:// URL or a bucket {name, source, mode}"
                )
            elif self.other_store(path, src):
                continue
            else:
                out[dst] = src
        if out or buckets:
            self.warn("file_mounts", NOT_HONOURED["file_mounts"])
        return out, buckets

    def other_store(self, path: str, url: str) -> bool:
        for scheme, cloud in OTHER_CLOUD_SCHEMES.items():
            if url.startswith(scheme):
                self.pin(path, f"{url} ({cloud})")
                return True
        if ".blob.core.windows.net" in url:
            self.pin(path, f"{url} (azure)")
            return True
        return False

    def bucket(self, path: str, dst: str, src: dict[str, Any]) -> BucketMount | None:
        allowed = ("name", "source", "store", "mode", "persistent", "config", "_bucket_sub_path")
        for key in src:
            if key not in allowed:
                self.bad(
                    f"{path}",
                    f"unknown key {_shown(str(key))}; allowed: name, source, store, mode, persistent",
                )
        name = self.text(path, src.get("name")).strip()
        raw = src.get("source")
        folders = tuple(self.text(path, s).strip() for s in raw) if isinstance(raw, list) else ()
        source: str | tuple[str, ...] = folders or self.text(path, raw).strip()
        store = self.text(path, src.get("store")).strip().lower()
        if store and store != "s3":
            self.pin(path, f"store {store}")
            return None
        if isinstance(source, str) and source and self.other_store(path, source):
            return None
        if not name and not source:
            self.bad(path, "a bucket mount needs a name or a source")
        mode = self.text(path, src.get("mode", "MOUNT")).strip().upper()
        if mode not in MOUNT_MODES:
            self.bad(path, f"mode: one of {', '.join(MOUNT_MODES)}")
        persistent = src.get("persistent", True)
        if not isinstance(persistent, bool):
            self.bad(path, "persistent: true or false")
        return BucketMount(dst, name, source, "s3", mode, persistent is not False)


# The fields of Resources that each key of an ``any_of``/``ordered`` entry sets (over the block's).
_FIELDS_OF_KEY = {
    "accelerators": ("accelerator", "accelerator_count", "accelerators"),
    "infra": ("region", "zone"),
    "cloud": (),
    "region": ("region", "zone"),
    "zone": ("region", "zone"),
    "image_id": ("image_id", "image_ids", "docker_image"),
    "job_recovery": ("job_recovery",),
    "spot_recovery": ("job_recovery",),
}


def _merged(top: Resources, entry: Resources, keys: dict[str, Any]) -> Resources:
    """``top`` with what the entry's own ``keys`` set (SkyPilot: an entry overrides the block)."""
    names = {f for key in keys for f in _FIELDS_OF_KEY.get(key, (key,)) if hasattr(entry, f)}
    return replace(top, **{f: getattr(entry, f) for f in names}, extras={**top.extras, **entry.extras})


def _shown(path: str) -> str:
    return path if len(path) <= 80 else f"{path[:77]}..."  # a 200 KB key is named, not echoed


# ------------------------------------------------------------------------------------ checks
def check_workdir(spec: TaskSpec, base: Path) -> Path | None:
    """The local workdir as a folder that exists (relative to ``base``), or :class:`TaskFileError`."""
    if spec.workdir is None or spec.workdir.kind != "local":
        return None
    folder = (base / Path(spec.workdir.path).expanduser()).resolve()
    if not folder.is_dir():
        raise TaskFileError([TaskIssue(None, "workdir", f"{folder} is not a folder")])
    return folder


def plan_conflicts(spec: TaskSpec, option: PlanOption | Mapping[str, Any]) -> list[str]:
    """Where a SkyPilot file's resource request disagrees with the plan option (warnings).

    With alternatives (``{A100: 8, H100: 8}``, ``any_of``) a value disagrees when no alternative
    asks for it; an alternative that leaves a key free accepts any value."""
    notes = []
    typed = PlanOption.read(option)
    groups = typed.groups
    types = set(typed.instance_types)
    nodes = typed.nodes
    choices = spec.resources.choices
    if spec.num_nodes is not None and spec.num_nodes != nodes:
        notes.append(f"the file asks for num_nodes {spec.num_nodes}; the plan runs {nodes}")
    asked_types = _asked(c.instance_type for c in choices)
    if asked_types and types and not types <= set(asked_types):
        notes.append(
            f"the file asks for {' or '.join(asked_types)}; the plan uses {', '.join(sorted(types))}"
        )
    asked_gpus = _asked(g for c in choices for g, _ in (c.accelerators or (("", 0),)))
    if asked_gpus and groups:
        models = {g.gpu_model.upper() for g in groups}
        wanted = [a.upper() for a in asked_gpus]
        if not all(any(w in m or m in w for w in wanted) for m in models if m):
            notes.append(
                f"the file asks for {' or '.join(asked_gpus)}; the plan uses {', '.join(sorted(models))}"
            )
    markets = {g.market or "" for g in groups}
    asked_spot = {c.use_spot for c in choices}
    if (
        None not in asked_spot
        and groups
        and not any(markets == {"spot" if s else "on-demand"} for s in asked_spot)
    ):
        said = " or ".join(sorted(str(s) for s in asked_spot))
        notes.append(f"the file asks for use_spot {said}; the plan uses {' and '.join(sorted(markets))}")
    asked_regions = _asked(c.region for c in choices)
    if asked_regions and typed.region and typed.region not in asked_regions:
        notes.append(f"the file asks for region {' or '.join(asked_regions)}; the plan is in {typed.region}")
    return notes


def _asked(values: Any) -> list[str]:
    """The values the alternatives ask for, in order; [] when one of them leaves the key free."""
    out: list[str] = []
    for v in values:
        if not v:
            return []
        if v not in out:
            out.append(v)
    return out


# ------------------------------------------------------------------------ plain commands
# env names whose values are credentials: shown to nobody (the nodes get them from the rendezvous)
SECRET_ENV_RE = re.compile(
    r"TOKEN|SECRET|PASSW|PWD|KEY|CREDENTIAL|AUTH|PRIVATE|COOKIE|SESSION", re.IGNORECASE
)
REDACTED = "<redacted>"


def redacted(text: str) -> str:
    """The task file as the API and the job page show it: the value of every ``envs`` entry whose
    name looks like a credential (``HF_TOKEN``, ``WANDB_API_KEY``, ``DB_PASSWORD``) and of every
    ``secrets`` entry replaced by ``<redacted>``, so a teammate who may read the job cannot read
    the owner's secrets. Values shorter than 4 characters are left (replacing them would garble
    the file, and they are no secret worth the name).

    Two passes: where the value is written (its YAML node's span, whatever its style: quoted with
    escapes, folded, a block; the lines kept), then wherever the value appears verbatim elsewhere
    (a ``run`` that echoes it)."""
    if not text:
        return text
    try:
        node, _ = load_bounded(text)
    except TaskFileError:
        return text  # not YAML: a stored file was read at launch, so none is stored
    spans: dict[tuple[int, int], str] = {}
    for scalar in _hidden_value_nodes(node):
        spans[(scalar.start_mark.index, scalar.end_mark.index)] = scalar.value
    for (start, end), _value in sorted(spans.items(), reverse=True):  # from the end: offsets stay
        written = text[start:end]
        if written[1:-1] == _value and written[:1] in "'\"" and written[:1] == written[-1:]:
            hidden = written[0] + REDACTED + written[0]  # quoted as written: 'x' shows '<redacted>'
        else:  # any other style: one plain <redacted>, the lines it spanned kept (empty)
            hidden = REDACTED + "\n" * written.count("\n")
        text = text[:start] + hidden + text[end:]
    for value in sorted(set(spans.values()), key=len, reverse=True):  # a value inside another: whole
        text = text.replace(value, REDACTED)
    return text


def _hidden_value_nodes(root: yaml.Node | None) -> list[yaml.ScalarNode]:
    """The scalar nodes of the values :func:`redacted` hides (at least 4 characters)."""
    out = []
    for key, section in _pairs(root):
        if key.value not in ("envs", "secrets"):
            continue
        for name, value in _pairs(section):
            hidden = key.value == "secrets" or bool(SECRET_ENV_RE.search(str(name.value)))
            if hidden and isinstance(value, yaml.ScalarNode) and value.tag != "tag:yaml.org,2002:null":
                if len(value.value) >= 4:
                    out.append(value)
    return out


def _pairs(node: yaml.Node | None) -> list[tuple[yaml.Node, yaml.Node]]:
    return list(node.value) if isinstance(node, yaml.MappingNode) else []


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


def task_env(spec: TaskSpec) -> dict[str, str]:
    """What the task file gives every node's environment: its ``envs``, its secrets' values
    (SkyPilot gives a task its secrets as env values) and the checkpoint settings."""
    env = dict(spec.envs)
    env.update(spec.secret_values)
    if spec.checkpoint is not None:
        env.update(SRIFTY_CHECKPOINT_DIR=CHECKPOINT_DIR, SRIFTY_CHECKPOINT_S3=spec.checkpoint.s3_prefix)
    return env


def node_env(
    spec: TaskSpec | None,
    option: PlanOption | Mapping[str, Any],
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
    counts elsewhere; ``fleet.network.network_env``); the file's ``envs`` (``task_env``) may
    override them. ``spec`` None: ``type_env`` already holds the task's part (a job's prepared
    ``Job.node_env``, ``launcher.launch.prepare_node_env``).
    """
    typed = PlanOption.read(option)
    counts: list[tuple[NodeGroup, int]] = []
    for g in typed.groups:
        counts += [(g, i) for i in range(g.count)]
    if not 0 <= node_rank < len(counts):
        raise ValueError(f"node_rank {node_rank} outside 0..{len(counts) - 1}")
    group, index = counts[node_rank]
    batches = group.batch_per_node
    batch = batches[index] if index < len(batches) else (batches[0] if batches else 0)
    env = dict((type_env or {}).get(group.instance_type, {}))
    if spec is not None:
        env.update(task_env(spec))
    env.update(
        MASTER_ADDR=node_ips[0] if node_ips else "127.0.0.1",
        MASTER_PORT=str(master_port),
        NODE_RANK=str(node_rank),
        NNODES=str(len(counts)),
        NPROC_PER_NODE=str(group.gpus_per_node),
        SRIFTY_BATCH_PER_NODE=str(batch),
        SRIFTY_PER_NODE_BATCH=str(batch),  # the name scripts written for train_command jobs read
        SRIFTY_NNODES=str(len(counts)),
        SRIFTY_NODE_RANK=str(node_rank),
        SRIFTY_GLOBAL_BATCH=_global_batch(typed),
        SKYPILOT_NODE_RANK=str(node_rank),
        SKYPILOT_NODE_IPS="\n".join(node_ips),
        SKYPILOT_NUM_NODES=str(len(counts)),
        SKYPILOT_NUM_GPUS_PER_NODE=str(group.gpus_per_node),
    )
    return env


def _global_batch(option: PlanOption) -> str:
    """``SRIFTY_GLOBAL_BATCH``'s value: the option's global batch, empty when it has none."""
    return "" if option.global_batch is None else str(option.global_batch)


# ------------------------------------------------------------------------------ sky export
# ``sky launch`` sets only SkyPilot's names on a node; torchrun commands (Srifty's own example,
# most DDP scripts) read these. MASTER_PORT keeps a value given at launch (``--env``).
SKY_PREAMBLE_MARK = "# Srifty: torchrun's names from SkyPilot's"
SKY_PREAMBLE = (
    SKY_PREAMBLE_MARK + " (sky launch sets only SKYPILOT_*)\n"
    'export NNODES="$SKYPILOT_NUM_NODES"\n'
    'export NODE_RANK="$SKYPILOT_NODE_RANK"\n'
    'export MASTER_ADDR="$(printf \'%s\\n\' "$SKYPILOT_NODE_IPS" | head -n 1)"\n'
    'export MASTER_PORT="${{MASTER_PORT:-{port}}}"\n'
    'export NPROC_PER_NODE="${{SKYPILOT_NUM_GPUS_PER_NODE:-{gpus}}}"\n'
    'export SRIFTY_NNODES="$NNODES" SRIFTY_NODE_RANK="$NODE_RANK"\n'
)
DEFAULT_SKY_RUN = (
    'torchrun --nnodes "$NNODES" --nproc-per-node "$NPROC_PER_NODE" --node-rank "$NODE_RANK" \\\n'
    '  --master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT" \\\n'
    '  train.py --batch "$SRIFTY_BATCH_PER_NODE"\n'
)
# An AWS zone name (us-east-1a, us-west-2-lax-1a); a zone ID (use1-az1) is named per account.
ZONE_NAME_RE = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d+([a-z]|(-[a-z]+)+-\d+[a-z])$")
CHECKPOINT_MOUNT_MODE = "MOUNT_CACHED"  # SkyPilot's mode for writes (checkpoints), uploaded behind
# Where SkyPilot's AWS catalog names a GPU otherwise than EC2 (and our catalog) do. Source: the
# catalog fetcher of SkyPilot 0.14.1, sky/catalog/data_fetchers/fetch_aws.py
# (get_additional_columns), which renames these instance types' accelerators; every other type
# keeps EC2's GpuInfo name there, as ours does. An export that names a GPU SkyPilot's catalog
# lacks is refused by ``sky launch`` (no instance type offers it).
SKY_ACCELERATOR_BY_TYPE = {
    "p3dn.24xlarge": "V100-32GB",
    "p4de.24xlarge": "A100-80GB",
    "p5e.48xlarge": "H200",
    "p5en.48xlarge": "H200",
}
SKY_ACCELERATOR_BY_FAMILY = {"g7e": "RTXPRO6000"}  # EC2 and our catalog: "RTX PRO Server 6000"
SKY_ACCELERATOR_BY_NAME = {"RTX PRO Server 6000": "RTXPRO6000"}  # a type the tables above miss


def sky_accelerator(instance_type: str, gpu_model: str) -> str:
    """The name SkyPilot's AWS catalog gives the GPU of ``instance_type`` (our catalog calls it
    ``gpu_model``): its per-type renames first, then the GPU name, else ours unchanged."""
    if instance_type in SKY_ACCELERATOR_BY_TYPE:
        return SKY_ACCELERATOR_BY_TYPE[instance_type]
    family = instance_type.split(".", 1)[0]
    if family in SKY_ACCELERATOR_BY_FAMILY:
        return SKY_ACCELERATOR_BY_FAMILY[family]
    return SKY_ACCELERATOR_BY_NAME.get(gpu_model, gpu_model)


def to_skypilot(
    option: PlanOption | Mapping[str, Any],
    spec: TaskSpec | None = None,
    *,
    checkpoint_interval_s: float | None = None,
    zone_names: Mapping[str, str] | None = None,
) -> list[tuple[str, str]]:
    """The plan option as SkyPilot task files ``[(filename, yaml)]``: one per instance type.

    Each file runs under ``sky launch`` as Srifty runs it: ``run`` starts with
    :data:`SKY_PREAMBLE` (torchrun's ``NNODES``, ``NODE_RANK``, ``MASTER_ADDR`` = the first of
    ``SKYPILOT_NODE_IPS``, ``MASTER_PORT``, ``NPROC_PER_NODE`` from SkyPilot's names); a
    ``checkpoint`` is a bucket mount at :data:`CHECKPOINT_DIR` with the ``SRIFTY_CHECKPOINT_*``
    values the node script reads (``checkpoint_interval_s``: the plan's interval for ``auto``);
    a ``git:`` workdir is ``workdir: {url, ref}``; ``infra`` pins the region and, when the
    option's price is in one zone whose name is known, that zone (``zone_names``: zone ID ->
    name in the account that launches). ``run`` and ``setup`` are YAML literal blocks.

    SkyPilot launches one instance type per cluster, so a mixed plan becomes one file per type
    with a note at the top; the per-node batch of each type is in ``SRIFTY_BATCH_PER_NODE``.
    """
    typed = PlanOption.read(option)
    by_type: dict[str, list[NodeGroup]] = {}
    for g in typed.groups:
        by_type.setdefault(g.instance_type, []).append(g)
    base = spec.name if spec else f"srifty-plan-option-{1 if typed.rank is None else typed.rank}"
    files = []
    for itype, gs in by_type.items():
        name = base if len(by_type) == 1 else f"{base}-{itype.replace('.', '-')}"
        zone, zone_note = _sky_zone(gs, zone_names or {})
        doc = _sky_doc(typed, spec, name, itype, gs, zone, checkpoint_interval_s)
        header = _sky_header(typed, itype, gs, by_type, zone_note)
        files.append((f"{name}.sky.yaml", header + _dump_blocks(doc)))
    return files


def _sky_doc(
    option: PlanOption,
    spec: TaskSpec | None,
    name: str,
    itype: str,
    gs: list[NodeGroup],
    zone: str,
    checkpoint_interval_s: float | None,
) -> dict[str, Any]:
    """One instance type's task file, as a mapping in SkyPilot's key order."""
    doc: dict[str, Any] = {"name": name}
    if spec and spec.workdir and spec.workdir.kind == "local":
        doc["workdir"] = spec.workdir.path
    elif spec and spec.workdir:  # SkyPilot 0.14 clones a repository given as {url, ref}
        doc["workdir"] = {"url": spec.workdir.url, **({"ref": spec.workdir.ref} if spec.workdir.ref else {})}
    doc["num_nodes"] = sum(g.count for g in gs)
    infra = "/".join(p for p in ("aws", option.region, zone) if p)
    resources: dict[str, Any] = {
        "infra": infra,
        "instance_type": itype,
        # a row without a GPU name: SkyPilot's generic "GPU" (NodeGroup.gpu_model is "" then)
        "accelerators": f"{sky_accelerator(itype, gs[0].gpu_model or 'GPU')}:{gs[0].gpus_per_node}",
        "use_spot": any(g.is_spot for g in gs),
    }
    if spec and (image := _sky_image(spec.resources, option.region)):
        resources["image_id"] = image
    doc["resources"] = resources
    doc["envs"] = _sky_envs(option, spec, gs, checkpoint_interval_s)
    if spec and spec.secrets:
        doc["secrets"] = {n: None for n in spec.secrets}
    mounts: dict[str, Any] = {}
    if spec:
        mounts.update(spec.file_mounts)
        mounts.update({d: _bucket_doc(b) for d, b in spec.bucket_mounts.items()})
        if spec.checkpoint is not None:  # the node script's checkpoint folder, kept in the bucket
            mounts[CHECKPOINT_DIR] = {"source": spec.checkpoint.s3_prefix, "mode": CHECKPOINT_MOUNT_MODE}
    if mounts:
        doc["file_mounts"] = mounts
    if spec and spec.setup:
        doc["setup"] = spec.setup
    if spec is None or spec.run.strip():  # a file without run exports none (SkyPilot: provision only)
        doc["run"] = with_sky_preamble(spec.run if spec else DEFAULT_SKY_RUN, gs[0].gpus_per_node)
    return doc


def _sky_image(resources: Resources, region: str) -> str:
    """The file's image for the option's region: its AMI there, or its Docker image (SkyPilot runs
    the task in it; Srifty's own launch does not)."""
    ami = resources.image_for(region)
    return ami or (f"docker:{resources.docker_image}" if resources.docker_image else "")


def _sky_envs(
    option: PlanOption, spec: TaskSpec | None, gs: list[NodeGroup], interval_s: float | None
) -> dict[str, str | None]:
    """The file's envs, its launch-time names as ``null``, the plan's batch and the checkpoint's values."""
    envs: dict[str, str | None] = dict(spec.envs) if spec else {}
    secrets = set(spec.secrets) if spec else set()
    # A value the file leaves to the launch stays null (SkyPilot asks for it); a secret's
    # value is never written into a file that is downloaded and shared.
    envs.update({n: None for n in (spec.required_envs if spec else ()) if n not in secrets})
    # Nor a credential-like env's: a plan keeps its file redacted, and "<redacted>" exported as
    # HF_TOKEN's value would reach the job under sky launch; null makes SkyPilot ask (--env).
    envs.update({n: None for n, v in envs.items() if v == REDACTED or SECRET_ENV_RE.search(n)})
    batch = str((gs[0].batch_per_node or (0,))[0])
    envs.update(SRIFTY_BATCH_PER_NODE=batch, SRIFTY_PER_NODE_BATCH=batch)
    envs["SRIFTY_GLOBAL_BATCH"] = _global_batch(option)
    if spec and spec.checkpoint is not None:
        envs.update(SRIFTY_CHECKPOINT_DIR=CHECKPOINT_DIR, SRIFTY_CHECKPOINT_S3=spec.checkpoint.s3_prefix)
        minutes = spec.checkpoint.interval_min
        seconds = minutes * 60 if minutes is not None else interval_s
        if seconds is not None:
            envs["SRIFTY_CHECKPOINT_INTERVAL_S"] = str(round(seconds))
    return envs


def with_sky_preamble(run: str, gpus_per_node: int) -> str:
    """``run`` after :data:`SKY_PREAMBLE` (once: a file exported before keeps its own)."""
    if run.startswith(SKY_PREAMBLE_MARK):
        return run
    preamble = SKY_PREAMBLE.format(port=DEFAULT_MASTER_PORT, gpus=gpus_per_node)
    return preamble + (run if run.endswith("\n") else run + "\n")


def _sky_zone(gs: list[NodeGroup], zone_names: Mapping[str, str]) -> tuple[str, str]:
    """(zone name to pin, note for the header): the one zone the option's price is in.

    The plan names zones by ID (``use1-az1``: the same place in every account); SkyPilot reads
    a zone *name*, which each account maps to IDs its own way, so an ID is pinned only through
    ``zone_names``; otherwise the header says which zone won and how to pin it."""
    zones = {g.zone or "" for g in gs}
    if len(zones) != 1 or not (zone := zones.pop()):
        return "", ""
    name = zone if ZONE_NAME_RE.match(zone) else zone_names.get(zone, "")
    if name:
        return name, f"# The price that won is in zone {zone}{f' ({name})' if name != zone else ''}.\n"
    return "", (
        f"# The price that won is in zone ID {zone}; to pin it, append its name in your account to\n"
        f"# infra (aws ec2 describe-availability-zones --zone-ids {zone} --query 'AvailabilityZones[0].ZoneName').\n"
    )


def _sky_header(
    option: PlanOption,
    itype: str,
    gs: list[NodeGroup],
    by_type: dict[str, list[NodeGroup]],
    zone_note: str,
) -> str:
    nodes = sum(g.count for g in gs)
    spot = any(g.is_spot for g in gs)
    rank = "?" if option.rank is None else option.rank
    header = f"# Srifty plan option {rank}: {nodes} x {itype} ({'spot' if spot else 'on-demand'})"
    header += f" in {option.region or '?'}.\n" + zone_note
    if len(by_type) > 1:
        total = option.nodes
        header += (
            f"# NOTE: this plan mixes {len(by_type)} instance types ({', '.join(by_type)}; {total} nodes in all).\n"
            "# SkyPilot runs one type per cluster: launch these files as separate clusters only if your\n"
            "# training code joins them (e.g. one torchrun rendezvous); otherwise launch with Srifty.\n"
            "# In each cluster, NNODES, NODE_RANK and MASTER_ADDR are that cluster's own.\n"
        )
    return header


class _BlockDumper(yaml.SafeDumper):
    """Writes a string with a line break as a literal block (``run: |``), as people write them."""


def _block_str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    # PyYAML falls back to a quoted string where a block cannot say it (trailing spaces).
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|" if "\n" in data else None)


_BlockDumper.add_representer(str, _block_str)


def _dump_blocks(doc: dict[str, Any]) -> str:
    return yaml.dump(doc, Dumper=_BlockDumper, sort_keys=False, width=10_000, allow_unicode=True)


def _bucket_doc(bucket: BucketMount) -> dict[str, Any]:
    """A bucket mount as SkyPilot writes it (only the keys the file set or that differ from the defaults)."""
    doc: dict[str, Any] = {}
    if bucket.name:
        doc["name"] = bucket.name
    if bucket.source:
        doc["source"] = list(bucket.source) if isinstance(bucket.source, tuple) else bucket.source
    doc.update(store=bucket.store, mode=bucket.mode)
    if not bucket.persistent:
        doc["persistent"] = False
    return doc
