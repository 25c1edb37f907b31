"""Explicit serializers for profiling runs, their samples and agent events."""

from __future__ import annotations

import re
from typing import Any

from django.conf import settings
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from catalog.gpu_memory import largest_gpu_bytes
from catalog.models import InstanceType
from catalog.regions import AWS_REGIONS
from profiler.models import (
    BucketSample,
    CommSample,
    ComputeSample,
    Market,
    ProfilingRun,
    Provider,
    RunKind,
)
from srifty_web.fields import FloatField
from srifty_web.input_shape import MAX_SAMPLE_ELEMENTS, SHAPE_RE, InputShapeField, shape_of
from srifty_web.serializers import ModelSerializer

# \Z, not $: "$" also matches before a trailing newline, so "8,16\n" would pass.
BATCHES_RE = re.compile(r"^(auto|\d{1,6}(,\d{1,6}){0,31})\Z")
SIZES_RE = re.compile(r"^\d{1,12}(\.\d{1,6})?[KMG]?B?\.\.\d{1,12}(\.\d{1,6})?[KMG]?B?\Z", re.IGNORECASE)
MEMORY_RE = re.compile(r"^\d{1,12}(\.\d{1,6})?[KMG]B\Z", re.IGNORECASE)


def model_spec_problem(spec: str, provider: str, allow_local_code: bool, input_shape: str = "") -> str | None:
    """Why ``spec`` cannot be profiled by ``provider``, or ``None``.

    Library specs (torchvision/timm/transformers names) are checked against their registries,
    transformers overrides against their bounds and the largest GPU of the catalog (for
    ``input_shape``'s sequence length).
    A code spec (``package.module:factory``) runs the named code in the agent: on EC2 that is
    the team's own VM; locally it is this server, so only with ``allow_local_code``
    (``settings.LOCAL_CODE_EXECUTION``, or the operator's ``manage.py profile_model``)."""
    from workload.specs import SpecError, check_library_spec, parse_spec

    try:
        if parse_spec(spec).is_library:
            check_library_spec(
                spec, input_shape=shape_of(input_shape), memory_budget_bytes=largest_gpu_bytes()
            )
            return None
    except SpecError as exc:
        return str(exc)
    if provider == Provider.LOCAL and not allow_local_code:
        return (
            "model code (package.module:factory) runs on this server only when the operator allows "
            "it (SRIFTY_LOCAL_CODE=1); profile it on EC2, or use torchvision:NAME, timm:NAME or "
            "transformers:MODEL_TYPE"
        )
    return None


class ComputeSampleSerializer(ModelSerializer):
    class Meta:
        model = ComputeSample
        fields = [
            "batch_size",
            "phase",
            "median_ms",
            "p10_ms",
            "p90_ms",
            "mean_ms",
            "std_ms",
            "cv",
            "times_ms",
            "peak_memory_bytes",
        ]


class BucketSampleSerializer(ModelSerializer):
    class Meta:
        model = BucketSample
        fields = ["batch_size", "index", "size_bytes", "num_params", "ready_ms", "ready_fraction"]


class CommSampleSerializer(ModelSerializer):
    class Meta:
        model = CommSample
        fields = [
            "size_bytes",
            "world_size",
            "backend",
            "median_ms",
            "p10_ms",
            "p90_ms",
            "mean_ms",
            "std_ms",
            "cv",
            "times_ms",
            "algbw_gbps",
            "busbw_gbps",
        ]


RUN_FIELDS = [
    "id",
    "kind",
    "owner",
    "model_spec",
    "input_shape",
    "batch_sizes",
    "device",
    "precision",
    "iters",
    "max_memory",
    "world_size",
    "backend",
    "sizes",
    "nodes",
    "provider",
    "instance_type",
    "region",
    "market",
    "status",
    "phase",
    "progress",
    "error",
    "created_at",
    "started_at",
    "finished_at",
    "deadline_at",
    "instance_ids",
]
READ_ONLY = [
    "id",
    "owner",
    "status",
    "phase",
    "progress",
    "error",
    "created_at",
    "started_at",
    "finished_at",
    "deadline_at",
    "instance_ids",
]

# What one profiling run may ask of the machine it runs on (this server, for local runs).
MAX_BATCH = 65_536  # an explicit batch size
MAX_BATCH_ELEMENTS = 2**31  # largest explicit batch x sample elements: 8 GiB of fp32 input alone
MAX_WORLD_SIZE = {Provider.LOCAL: 16, Provider.EC2: 256}  # ranks, all on one host
MAX_MESSAGE_BYTES = 4 * 2**30  # the largest all_reduce message (defaults: gloo 64MB, nccl 1GB)
MAX_COMM_BYTES = {Provider.LOCAL: 16 * 2**30, Provider.EC2: 256 * 2**30}  # ranks x largest message, one host
MAX_MEMORY_BYTES = 16 * 2**40


def work_problems(attrs: dict, kind: str) -> dict[str, str]:
    """Field -> why a well-formed request would still take gigabytes or hours (checked after
    the syntax): the agent runs on this server for local runs, so nothing it is asked may be
    more than one machine can do."""
    from profiler.agent.units import ArgumentValueError, parse_size, parse_size_range

    errors: dict[str, str] = {}
    if kind == RunKind.COMPUTE:
        shape = attrs.get("input_shape", "")
        if SHAPE_RE.match(shape):
            elements = 1
            for dim in shape.split(","):
                elements *= int(dim)
            if elements == 0:
                errors["input_shape"] = "every dimension must be at least 1"
            elif elements > MAX_SAMPLE_ELEMENTS:
                errors["input_shape"] = f"{elements} elements per sample; at most {MAX_SAMPLE_ELEMENTS}"
            batches = attrs.get("batch_sizes", "auto")
            if BATCHES_RE.match(batches) and batches != "auto" and "input_shape" not in errors:
                sizes = [int(b) for b in batches.split(",")]
                if min(sizes) < 1 or max(sizes) > MAX_BATCH:
                    errors["batch_sizes"] = f"batch sizes from 1 to {MAX_BATCH}"
                elif max(sizes) * elements > MAX_BATCH_ELEMENTS:
                    errors["batch_sizes"] = (
                        f"batch {max(sizes)} x {elements} elements per sample is more than "
                        f"{MAX_BATCH_ELEMENTS} input elements"
                    )
        memory = attrs.get("max_memory")
        if memory and MEMORY_RE.match(memory):
            try:
                ok = 0 < parse_size(memory) <= MAX_MEMORY_BYTES
            except ArgumentValueError:
                ok = False
            if not ok:
                errors["max_memory"] = f"more than 0 and at most {MAX_MEMORY_BYTES // 2**40}TB"
    else:
        provider = attrs.get("provider", Provider.LOCAL)
        ranks = attrs.get("world_size", 2) // (attrs.get("nodes") or 1)  # on one host
        most = MAX_WORLD_SIZE.get(provider, MAX_WORLD_SIZE[Provider.LOCAL])
        if ranks > most:
            errors["world_size"] = (
                f"at most {most} ranks on one {'VM' if provider == Provider.EC2 else 'server'}"
            )
        size_range = attrs.get("sizes")
        if size_range and SIZES_RE.match(size_range):
            try:
                low, high = parse_size_range(size_range)
            except ArgumentValueError as exc:
                errors["sizes"] = str(exc)
            else:
                if high > MAX_MESSAGE_BYTES:
                    errors["sizes"] = f"messages of at most {MAX_MESSAGE_BYTES // 2**30}GB"
                elif high * ranks > MAX_COMM_BYTES.get(provider, MAX_COMM_BYTES[Provider.LOCAL]):
                    most = MAX_COMM_BYTES.get(provider, MAX_COMM_BYTES[Provider.LOCAL]) // 2**30
                    errors["sizes"] = f"{ranks} ranks x {high} bytes is more than {most}GB on one host"
    return errors


def cluster_problems(attrs: dict) -> dict[str, str]:
    """Field -> why ``attrs`` (with ``nodes`` given) is not an EC2 comm cluster; fills in the
    cluster's ``world_size`` (every GPU of every node) and ``backend`` (NCCL) when it is."""
    from fleet import network

    nodes, errors = attrs["nodes"], {}
    if attrs.get("kind", RunKind.COMPUTE) != RunKind.COMM:
        return {"nodes": "only comm runs span several nodes"}
    if attrs.get("provider", Provider.LOCAL) != Provider.EC2:
        return {"nodes": "a cluster comm run rents EC2 nodes: use provider ec2"}
    if nodes < 2:
        errors["nodes"] = "a cluster comm run spans at least 2 nodes (leave nodes out to profile one VM)"
    elif nodes > network.max_nodes():
        errors["nodes"] = f"at most {network.max_nodes()} nodes in one profiling run"
    if attrs.get("backend", "nccl") != "nccl":
        errors["backend"] = "a cluster comm run measures NCCL across the nodes' GPUs: nccl (or leave it out)"
    itype = (
        InstanceType.objects.select_related("accelerator").filter(name=attrs.get("instance_type", "")).first()
    )
    if itype is None:
        return errors  # the EC2 checks name the unknown type
    gpus = network.gpus_per_node(itype)
    if not gpus:
        errors["instance_type"] = f"{itype.name} has no whole NVIDIA GPU; NCCL across nodes needs them"
    elif "world_size" in attrs and attrs["world_size"] != nodes * gpus:
        errors["world_size"] = f"{nodes} nodes x {gpus} GPUs is {nodes * gpus} ranks (or leave it out)"
    if not errors:
        attrs["world_size"], attrs["backend"] = nodes * gpus, "nccl"
    return errors


class ProfilingRunSerializer(ModelSerializer):
    owner: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="username", read_only=True
    )
    max_minutes = serializers.IntegerField(
        write_only=True,
        required=False,
        min_value=1,
        max_value=24 * 60,
        help_text="Hard time limit (default from settings)",
    )
    nodes = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=1,
        max_value=10_000,
        help_text="EC2 comm cluster: N >= 2 nodes of instance_type in one placement group, NCCL over all "
        "their GPUs (world_size and backend follow); leave it out (null) to profile one VM",
    )

    class Meta:
        model = ProfilingRun
        fields = [*RUN_FIELDS, "max_minutes"]
        read_only_fields = READ_ONLY

    def validate(self, attrs: dict) -> dict:
        kind = attrs.get("kind", RunKind.COMPUTE)
        errors: dict[str, str] = {}
        if attrs.get("nodes") is not None:  # first: it decides world_size and backend
            errors.update(cluster_problems(attrs))
        if kind == RunKind.COMPUTE:
            problem = model_spec_problem(
                attrs.get("model_spec", ""),
                attrs.get("provider", Provider.LOCAL),
                self.context.get("allow_local_code", settings.LOCAL_CODE_EXECUTION),
                attrs.get("input_shape", ""),
            )
            if problem:
                errors["model_spec"] = problem
            if not SHAPE_RE.match(attrs.get("input_shape", "")):
                errors["input_shape"] = "comma-separated positive integers, e.g. 3,224,224"
            if not BATCHES_RE.match(attrs.get("batch_sizes", "auto")):
                errors["batch_sizes"] = "auto, or a comma-separated list of batch sizes"
            if attrs.get("device", "cpu") not in ("cpu", "cuda"):
                errors["device"] = "cpu or cuda"
            if attrs.get("precision", "fp32") not in ("fp32", "amp"):
                errors["precision"] = "fp32 or amp"
            if attrs.get("max_memory") and not MEMORY_RE.match(attrs["max_memory"]):
                errors["max_memory"] = "a size like 2GB or 512MB"
            if not 1 <= attrs.get("iters", 5) <= 1000:
                errors["iters"] = "between 1 and 1000"
        else:
            if attrs.get("backend", "gloo") not in ("gloo", "nccl"):
                errors.setdefault("backend", "gloo or nccl")
            if not 2 <= attrs.get("world_size", 2) <= 1024:
                errors.setdefault("world_size", "between 2 and 1024")
            if attrs.get("sizes") and not SIZES_RE.match(attrs["sizes"]):
                errors["sizes"] = "a range like 1KB..64MB"
        for name, problem in work_problems(attrs, kind).items():
            errors.setdefault(name, problem)
        if attrs.get("provider", Provider.LOCAL) == Provider.EC2:
            if not InstanceType.objects.filter(name=attrs.get("instance_type", "")).exists():
                errors["instance_type"] = "unknown instance type"
            if attrs.get("region") not in AWS_REGIONS:
                errors["region"] = "unknown region"
            if attrs.get("market", Market.ON_DEMAND) not in Market.values:
                errors["market"] = "spot or on-demand"
        elif attrs.get("device") == "cuda" and attrs.get("provider", Provider.LOCAL) == Provider.LOCAL:
            import torch

            if not torch.cuda.is_available():
                errors["device"] = "this server has no CUDA device; profile on EC2 or use cpu"
        if errors:
            raise serializers.ValidationError(errors)
        return attrs


# --- request schemas (OpenAPI only): what validate() requires of each kind of run -------------
WRITABLE = [f for f in RUN_FIELDS if f not in READ_ONLY] + ["max_minutes"]


class ComputeRunRequestSerializer(ProfilingRunSerializer):
    """A compute run: ``model_spec`` and ``input_shape`` are required (``kind`` defaults to compute)."""

    kind = serializers.ChoiceField(choices=["compute"], required=False, help_text="compute (the default)")
    model_spec = serializers.CharField(
        max_length=200,
        help_text="torchvision:NAME, timm:NAME, transformers:MODEL_TYPE or package.module:factory",
    )
    input_shape = InputShapeField(max_length=64)

    class Meta(ProfilingRunSerializer.Meta):
        fields = WRITABLE
        read_only_fields: list[str] = []


class CommRunRequestSerializer(ProfilingRunSerializer):
    """A communication run (AllReduce vs message size): ``kind`` is required and is comm."""

    kind = serializers.ChoiceField(choices=["comm"])

    class Meta(ProfilingRunSerializer.Meta):
        fields = WRITABLE
        read_only_fields: list[str] = []


class NoisyFlagSerializer(serializers.Serializer):
    """A measurement too noisy to plan on (``profiler.quality``)."""

    reason = serializers.CharField()
    batch_size = serializers.IntegerField(allow_null=True, help_text="compute: the batch size")
    phase = serializers.CharField(allow_null=True, help_text="compute: the phase; null: the whole batch")
    size_bytes = serializers.IntegerField(allow_null=True, help_text="comm: the message size")
    advice = serializers.CharField()


class ProfilingRunDetailSerializer(ProfilingRunSerializer):
    compute_samples = ComputeSampleSerializer(many=True, read_only=True)
    bucket_samples = BucketSampleSerializer(many=True, read_only=True)
    comm_samples = CommSampleSerializer(many=True, read_only=True)
    noisy = serializers.SerializerMethodField(
        help_text="Measurements too noisy to plan on: a coefficient of variation above 0.2, or a larger "
        "batch measured faster than a smaller one; the advice is to use more iterations"
    )

    class Meta(ProfilingRunSerializer.Meta):
        fields = [*RUN_FIELDS, "compute_samples", "bucket_samples", "comm_samples", "noisy"]

    @extend_schema_field(NoisyFlagSerializer(many=True))
    def get_noisy(self, run: ProfilingRun) -> list[dict[str, object]]:
        from profiler import quality

        flags = quality.compute_flags(run.compute_samples.all()) + quality.comm_flags(run.comm_samples.all())
        return [f.as_dict() for f in flags]


# (run, seq) is unique, so the largest seq bounds how many events one agent token can store.
# A compute run of 32 batch sizes x 1000 iterations posts ~35k events; a comm run far fewer.
MAX_AGENT_SEQ = 1_000_000
MAX_AGENT_INT = 2**53  # sizes and counts: exact in JSON, fit every integer column


class AgentEventSerializer(serializers.Serializer):
    """An agent post. Only these fields are kept (stored in ``RunEvent.payload``, replayed to
    viewers, broadcast): whatever else a body carries is dropped, so a token cannot store or
    push arbitrary data, nor override the ``run`` of the live messages."""

    seq = serializers.IntegerField(min_value=1, max_value=MAX_AGENT_SEQ)
    type = serializers.ChoiceField(choices=["progress", "sample", "result", "error"])
    phase = serializers.CharField(required=False, max_length=32)
    fraction = FloatField(required=False, min_value=0, max_value=1)
    time_ms = FloatField(required=False, min_value=0, max_value=3.6e6)
    message = serializers.CharField(required=False, max_length=10_000)
    batch_size = serializers.IntegerField(required=False, min_value=0, max_value=MAX_AGENT_INT)
    size_bytes = serializers.IntegerField(required=False, min_value=0, max_value=MAX_AGENT_INT)
    iteration = serializers.IntegerField(required=False, min_value=0, max_value=MAX_AGENT_INT)
    fits = serializers.BooleanField(required=False)
    sample = serializers.DictField(required=False)
    profile = serializers.DictField(required=False)

    def validate(self, attrs: dict) -> dict:
        if attrs["type"] == "result" and "profile" not in attrs:
            raise serializers.ValidationError({"profile": "a result event carries the profile document"})
        return attrs
