"""Explicit serializers of plan requests and stored plans."""

from __future__ import annotations

import math
import re
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from django.contrib.auth.models import User
from drf_spectacular.utils import (
    OpenApiExample,
    PolymorphicProxySerializer,
    extend_schema_field,
    extend_schema_serializer,
)
from rest_framework import serializers

from catalog.gpu_memory import largest_gpu_bytes
from catalog.models import Accelerator
from catalog.regions import AWS_REGIONS
from launcher.taskfile import MAX_TASK_BYTES, TaskFileError, redacted
from planner.app.models import PlanRecord, PlanStatus
from planner.defaults import (
    MARKET_DEFAULTS,
    MAX_NODE_BATCH_POINTS,
    MAX_NODES,
    MIN_BATCH_PER_GPU,
    PLAN_DEFAULTS,
    batch_grid_size,
    default_batch_range,
)
from planner.plan_result import TIME_COST_BAND_KEYS, PlanResult, PlanRow
from srifty_web.fields import FloatField
from srifty_web.input_shape import MAX_SAMPLE_ELEMENTS, InputShapeField, shape_of
from srifty_web.money import MONEY_TREE_NOTE, MONEY_TREE_PLACES, MoneyField, money_tree
from srifty_web.serializers import ModelSerializer

if TYPE_CHECKING:
    from django.db.models import QuerySet

    from catalog.models import InstanceOffering


def warm_model_registries() -> None:
    """Load torchvision's model registry (and torch under it) now, not in a request.

    Checking a spec's name (``check_library_spec``) loads its library's registry once per
    process; in the first plan request that import holds the GIL for seconds and every other
    request of the process waits behind it (bench/load.py, 2 busy cores: a 9-13 s stall of all
    50 API clients). The web server calls this before it serves."""
    from workload.specs import SpecError, check_library_spec

    try:
        check_library_spec("torchvision:resnet50")
    except (SpecError, ImportError):  # pragma: no cover - torchvision is a dependency
        pass


@extend_schema_field(
    {
        "type": "string",
        "maxLength": 200,
        "example": "torchvision:resnet50",
        "description": "torchvision:NAME, timm:NAME or transformers:MODEL_TYPE",
    }
)
class SpecField(serializers.CharField):
    """A library model spec (checked by ``check_library_spec``)."""


PRECISION_HELP = (
    "default amp for a spec; with profile_run, the profile's own precision (another one is planned "
    "with the profile's, and the plan's warnings say so)"
)


class PlanSpecModelSerializer(serializers.Serializer[dict[str, Any]]):
    """``model`` as a library model predicted from its operator counts (schema only)."""

    spec = SpecField(max_length=200)
    input_shape = InputShapeField(max_length=64)
    precision = serializers.ChoiceField(
        choices=["fp32", "tf32", "amp", "fp16", "bf16"], required=False, help_text=PRECISION_HELP
    )


class PlanProfileModelSerializer(serializers.Serializer[dict[str, Any]]):
    """``model`` as a finished compute profiling run of the team (schema only)."""

    profile_run = serializers.IntegerField(min_value=1, help_text="id of a succeeded compute profiling run")
    precision = serializers.ChoiceField(
        choices=["fp32", "tf32", "amp", "fp16", "bf16"], required=False, help_text=PRECISION_HELP
    )


# The schema says what validate() enforces: either spec and input_shape, or profile_run.
@extend_schema_field(
    PolymorphicProxySerializer(
        component_name="PlanModel",
        serializers=[PlanSpecModelSerializer, PlanProfileModelSerializer],
        resource_type_field_name=None,
    )
)
class ModelChoiceSerializer(serializers.Serializer[dict[str, Any]]):
    """Either a finished compute profiling run, or a library model to predict analytically.

    ``spec`` names a model in a library's registry (``torchvision:NAME``, ``timm:NAME``,
    ``transformers:MODEL_TYPE``): the server builds nothing else. A team's own model is
    profiled by the agent, and plans use that profile (its workload trace). The operator's
    ``manage.py plan`` passes ``context={"allow_code": True}`` to plan a factory directly."""

    profile_run = serializers.IntegerField(required=False, min_value=1)
    spec = SpecField(required=False, max_length=200)
    input_shape = InputShapeField(required=False, max_length=64)
    precision = serializers.ChoiceField(
        choices=["fp32", "tf32", "amp", "fp16", "bf16"], required=False, help_text=PRECISION_HELP
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        from workload.specs import SpecError, check_library_spec, parse_spec

        if attrs.get("profile_run"):
            return attrs
        attrs.setdefault("precision", "amp")
        errors = {}
        shape = shape_of(attrs.get("input_shape", ""))
        try:
            if self.context.get("allow_code"):
                parse_spec(attrs.get("spec", ""))
            else:
                # Overrides bounded, and the model must train on the catalog's largest GPU:
                # a 400 here, not a worker building it for ever (issue 33).
                check_library_spec(
                    attrs.get("spec", ""), input_shape=shape, memory_budget_bytes=largest_gpu_bytes()
                )
        except SpecError as exc:
            errors["spec"] = f"give profile_run, or spec as a library model: {exc}"
        if shape is None:
            errors["input_shape"] = "comma-separated positive integers, e.g. 3,224,224"
        elif not 1 <= math.prod(shape) <= MAX_SAMPLE_ELEMENTS:
            errors["input_shape"] = (
                f"every dimension at least 1, at most {MAX_SAMPLE_ELEMENTS} elements per sample"
            )
        if errors:
            raise serializers.ValidationError(errors)
        return attrs


class QuotaField(serializers.DictField):
    child = FloatField(min_value=0)


# --- how much a plan request may make the solver enumerate (in the worker, in memory) ---
# Measured on the bundled catalog (57 CUDA types, up to 109 offers a region, 2 cores):
# homogeneous curves cost one oracle call per type x node count x grid batch (~80 us each);
# mixes are a best-first search whose bounds prune well for "cost" under a deadline (64 nodes x
# 3 types: 3 s) but hardly for "time" / "throughput" (8 nodes x 3 types: 36 s to minutes, GBs).
MAX_LIST = 64  # gpu_models, quota classes
MAX_QUOTA_VCPUS = 10_000_000
QUOTA_KEY_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}\Z")
MAX_MIXED_SEARCH = 30_000_000  # "time"/"throughput": sum over regions of k-subsets x count vectors x batches


def allowed_offers(
    gpu_models: Collection[str] | None,
    task_constraints: dict[str, Any] | None,
    regions: Collection[str] | None,
) -> QuerySet[InstanceOffering]:
    """The offers (CUDA instance type x zone) of the GPU models, task file and regions a request
    allows (None: any)."""
    from catalog.models import InstanceOffering, InstanceType
    from planner.app.task_constraints import allowed_type_ids

    types = InstanceType.objects.ddp_capable()
    if gpu_models:
        types = types.filter(accelerator__name__in=gpu_models)
    allowed = allowed_type_ids(task_constraints)
    if allowed is not None:  # the task file's machines (its markets are in spot/on_demand)
        types = types.filter(pk__in=allowed)
    offers = InstanceOffering.objects.filter(instance_type__in=types)
    if regions:
        offers = offers.filter(zone__region__code__in=regions)
    return offers


def region_offer_counts(
    gpu_models: Collection[str] | None,
    task_constraints: dict[str, Any] | None,
    regions: Collection[str] | None,
    spot: bool,
    on_demand: bool,
) -> list[int]:
    """Candidate offers (CUDA instance type x allowed market) of each region allowed."""
    from django.db.models import Count

    markets = int(spot) + int(on_demand)
    counts = (
        allowed_offers(gpu_models, task_constraints, regions)
        .values("zone__region__code")
        .annotate(n=Count("instance_type", distinct=True))
    )
    return [row["n"] * markets for row in counts]


def offers_per_region(attrs: dict[str, Any]) -> list[int]:
    """Candidate offers (CUDA instance type x allowed market) of each region the request
    (its validated attributes) allows."""
    return region_offer_counts(
        attrs.get("gpu_models"),
        attrs.get("task_constraints"),
        attrs.get("regions"),
        bool(attrs.get("spot", True)),
        bool(attrs.get("on_demand", True)),
    )


def fit_default_batch_range(attrs: dict[str, Any]) -> None:
    """Narrow the *default* global batch range (the request named neither end) from below until
    ``max_nodes`` x its batch sizes fits :data:`MAX_NODE_BATCH_POINTS`: a large cluster drops the
    small global batches first (at 512 nodes, 256..4,096 becomes 512..4,096), which would leave
    its GPUs a sample or two each, below any sensible per-GPU minimum. A range the user gave is
    never changed: a search too large for it is a 400 naming max_nodes."""
    attrs["global_batch_min"], attrs["global_batch_max"] = default_batch_range(
        int(attrs.get("max_nodes", PLAN_DEFAULTS["max_nodes"])),
        attrs["global_batch_min"],
        attrs["global_batch_max"],
    )


def search_size_problems(attrs: dict[str, Any]) -> dict[str, str]:
    """Field -> why the request would make the solver run for minutes or take gigabytes."""
    nodes, types = (
        attrs.get("max_nodes", PLAN_DEFAULTS["max_nodes"]),
        attrs.get("max_types", PLAN_DEFAULTS["max_types"]),
    )
    grid = batch_grid_size(
        attrs.get("global_batch_min", PLAN_DEFAULTS["global_batch_min"]),
        attrs.get("global_batch_max", PLAN_DEFAULTS["global_batch_max"]),
    )
    if nodes * grid > MAX_NODE_BATCH_POINTS:
        return {
            "max_nodes": f"max_nodes {nodes} x {grid} global batch sizes searched is more than "
            f"{MAX_NODE_BATCH_POINTS}: lower max_nodes or narrow global_batch_min..global_batch_max"
        }
    # No gate on count vectors: the solver streams them under a counted memory budget
    # (PLAN_MAX_MEMORY_MB) and refuses, naming max_nodes / max_types, what cannot fit.
    if types > 1 and attrs.get("objective") != "cost":
        search = sum(
            math.comb(k_r, k) * math.comb(nodes, k) * grid
            for k_r in offers_per_region(attrs)
            for k in range(2, types + 1)
        )
        if search > MAX_MIXED_SEARCH:
            return {
                "max_types": f"mixing {types} types for objective {attrs.get('objective')!r} searches ~{search} "
                f"configurations; at most {MAX_MIXED_SEARCH}: lower max_types or max_nodes, "
                "choose fewer regions or gpu_models, or use objective 'cost'"
            }
    return {}


# FloatField reads "1000.50" as well as 1000.5; the stored request keeps the number the
# planner uses, and the API echoes it (plan.request) as a decimal string.
MONEY_INPUT_HELP = (
    'US dollars: a decimal string (e.g. "1000.00") or a JSON number; echoed back in the plan\'s '
    "request as a decimal string"
)


@extend_schema_serializer(
    examples=[
        OpenApiExample(
            "Cheapest within a deadline",
            request_only=True,
            value={
                "model": {"spec": "torchvision:resnet50", "input_shape": "3,224,224", "precision": "amp"},
                "samples_per_epoch": 1281167,
                "epochs": 90,
                "objective": "cost",
                "deadline_hours": 24,
            },
        ),
        OpenApiExample(
            "Fastest within a budget, from a profile",
            request_only=True,
            value={
                "model": {"profile_run": 12},
                "samples_per_epoch": 1281167,
                "epochs": 90,
                "objective": "time",
                "budget_usd": 1000,
                "max_types": 2,
            },
        ),
    ]
)
class PlanRequestSerializer(serializers.Serializer[dict[str, Any]]):
    name = serializers.CharField(required=False, allow_blank=True, max_length=120)
    model = ModelChoiceSerializer()
    samples_per_epoch = serializers.IntegerField(required=False, min_value=1, max_value=10**13)
    epochs = FloatField(required=False, min_value=0.001, max_value=100_000)
    iterations = serializers.IntegerField(required=False, min_value=1, max_value=10**12)
    objective = serializers.ChoiceField(choices=["cost", "time", "throughput"])
    deadline_hours = FloatField(required=False, allow_null=True, min_value=0.01, max_value=24 * 365)
    budget_usd = FloatField(
        required=False, allow_null=True, min_value=0.01, max_value=1e9, help_text=MONEY_INPUT_HELP
    )
    max_hourly_usd = FloatField(
        required=False, allow_null=True, min_value=0.01, max_value=1e7, help_text=MONEY_INPUT_HELP
    )
    regions = serializers.ListField(
        child=serializers.CharField(max_length=32),
        required=False,
        allow_empty=True,
        max_length=len(AWS_REGIONS),
    )
    spot = serializers.BooleanField(default=MARKET_DEFAULTS["spot"])
    on_demand = serializers.BooleanField(default=MARKET_DEFAULTS["on_demand"])
    max_nodes = serializers.IntegerField(
        default=int(PLAN_DEFAULTS["max_nodes"]), min_value=1, max_value=MAX_NODES
    )
    max_types = serializers.IntegerField(default=int(PLAN_DEFAULTS["max_types"]), min_value=1, max_value=3)
    quotas_on_demand = QuotaField(required=False)
    quotas_spot = QuotaField(required=False)
    global_batch_min = serializers.IntegerField(
        default=int(PLAN_DEFAULTS["global_batch_min"]), min_value=1, max_value=1 << 20
    )
    global_batch_max = serializers.IntegerField(
        default=int(PLAN_DEFAULTS["global_batch_max"]), min_value=1, max_value=1 << 20
    )
    min_batch_per_gpu = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=1,
        max_value=1 << 16,
        help_text="Smallest batch per GPU the solver ranks (a plan below it only when nothing else "
        f"fits); default: the profile's knee when planning from a profile that has one, else {MIN_BATCH_PER_GPU}",
    )
    accumulation_steps = serializers.IntegerField(
        default=1,
        min_value=1,
        max_value=1024,
        help_text="Gradient accumulation: micro-steps per optimizer step (DDP's no_sync on all but the "
        "last). The global batch is one micro-step's samples over all GPUs; the all-reduce and the "
        "optimizer step run once per this many micro-steps. 1: none",
    )
    checkpoint_interval_h = FloatField(
        default=PLAN_DEFAULTS["checkpoint_interval_h"], min_value=0.01, max_value=24 * 365
    )
    restart_overhead_h = FloatField(
        default=PLAN_DEFAULTS["restart_overhead_h"], min_value=0, max_value=24 * 30
    )
    max_miss_risk = FloatField(required=False, allow_null=True, min_value=0.001, max_value=1)
    gpu_models = serializers.ListField(
        child=serializers.CharField(max_length=64), required=False, allow_empty=True, max_length=MAX_LIST
    )
    baseline_gpu = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=64,
        help_text="GPU a SkyPilot-style user would ask for, e.g. A100",
    )
    top_k = serializers.IntegerField(default=int(PLAN_DEFAULTS["top_k"]), min_value=1, max_value=50)
    task = serializers.CharField(
        required=False,
        allow_blank=True,
        trim_whitespace=False,
        max_length=MAX_TASK_BYTES,
        help_text="A task file (Srifty's or SkyPilot's YAML): its resources become the plan's "
        "constraints (accelerators, cpus, memory, use_spot, region/zone, num_nodes as a fixed "
        "count, network_tier: best as EFA, instance_type); the plan's constraints_from_task lists them",
    )
    task_filename = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=200,
        help_text="the task file's name (a file without name: is named after its stem)",
    )

    def _quotas(self, value: dict[str, Any]) -> dict[str, Any]:
        if len(value) > MAX_LIST:
            raise serializers.ValidationError(f"at most {MAX_LIST} quota classes")
        bad = [k for k in value if not QUOTA_KEY_RE.match(str(k))]
        if bad:
            raise serializers.ValidationError(
                f"quota class names are letters, digits, - and _ (at most 64): {str(bad[0])[:70]!r}"
            )
        big = [k for k, v in value.items() if v > MAX_QUOTA_VCPUS]
        if big:
            raise serializers.ValidationError(f"{big[0]}: at most {MAX_QUOTA_VCPUS} vCPUs")
        return value

    def validate_quotas_on_demand(self, value: dict[str, Any]) -> dict[str, Any]:
        return self._quotas(value)

    def validate_quotas_spot(self, value: dict[str, Any]) -> dict[str, Any]:
        return self._quotas(value)

    def validate_regions(self, value: list[str]) -> list[str]:
        bad = [r for r in value if r not in AWS_REGIONS]
        if bad:
            raise serializers.ValidationError(f"unknown region(s): {', '.join(bad)}")
        return value

    def validate_gpu_models(self, value: list[str]) -> list[str]:
        known = set(Accelerator.objects.values_list("name", flat=True))
        bad = [g for g in value if g not in known]
        if bad:
            raise serializers.ValidationError(f"unknown GPU model(s): {', '.join(bad)}")
        return value

    def validate_baseline_gpu(self, value: str) -> str:
        """A GPU the catalog rents out for DDP (case-insensitive, ``a100`` = ``A100``), returned
        as the catalog names it; blank: no SkyPilot-style baseline."""
        from catalog.models import InstanceType

        name = value.strip()
        if not name:
            return ""
        known = sorted(
            set(
                InstanceType.objects.ddp_capable()
                .filter(accelerator__isnull=False)
                .values_list("accelerator__name", flat=True)
            )
        )
        match: str | None = next((str(k) for k in known if k.lower() == name.lower()), None)
        if match is None:
            raise serializers.ValidationError(
                f"unknown GPU {name[:64]!r}; the catalog has: {', '.join(known) or 'no GPUs (import_catalog)'}"
            )
        return match

    def validate_task(self, value: str) -> str:
        # a browser's form sends CRLF line breaks; the file is the same file either way
        return value.replace("\r\n", "\n")

    def _apply_task(self, attrs: dict[str, Any]) -> dict[str, str]:
        """Read ``task`` and narrow the request to its resources (planner.app.task_constraints);
        a file that cannot be read is a 400 under ``task`` with each problem's line."""
        from catalog.models import InstanceType
        from planner.app import task_constraints as tc

        text = attrs.get("task") or ""
        if not text.strip():
            attrs.pop("task", None)
            return {}
        try:
            spec = tc.read(text, attrs.get("task_filename", ""))
            lines = tc.resource_lines(text)
            aliases = tc.gpu_aliases(
                InstanceType.objects.ddp_capable()
                .filter(accelerator__isnull=False)
                .values_list("name", "accelerator__name")
            )
            choices = tc.choices_of(spec, aliases, lines, AWS_REGIONS)
        except (TaskFileError, tc.TaskConstraintError) as exc:
            raise serializers.ValidationError({"task": tc.issues_text(exc)}) from None
        given = set(self.initial_data or {})
        errors = tc.merge(attrs, choices, spec.num_nodes, given, aliases)
        # stored as the job pages show a task file: a teammate who may read the plan (and its
        # SkyPilot export) cannot read the owner's credentials (launcher.taskfile.redacted)
        attrs["task"] = redacted(text)
        attrs["task_constraints"] = tc.constraints_json(choices, spec.num_nodes)
        attrs["constraints_from_task"] = tc.from_task(choices, spec.num_nodes, lines)
        return errors

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        errors = self._apply_task(attrs)
        if errors:
            raise serializers.ValidationError(errors)
        if attrs.get("samples_per_epoch") and attrs.get("epochs"):
            attrs["total_samples"] = attrs["samples_per_epoch"] * attrs["epochs"]
        elif attrs.get("iterations"):
            if "global_batch_max" not in (self.initial_data or {}):
                # iterations are counted at the recipe's batch, not the default range's top
                attrs["global_batch_max"] = attrs["global_batch_min"]
            attrs["total_samples"] = attrs["iterations"] * attrs["global_batch_max"]
            attrs["global_batch_min"] = attrs["global_batch_max"]  # iterations are counted at one batch
        else:
            errors["samples_per_epoch"] = "give samples_per_epoch and epochs, or iterations"
        needs = {"cost": "deadline_hours", "time": "budget_usd", "throughput": "max_hourly_usd"}[
            attrs["objective"]
        ]
        if attrs.get(needs) is None:
            errors[needs] = f"required for objective {attrs['objective']!r}"
        if attrs["global_batch_min"] > attrs["global_batch_max"]:
            errors["global_batch_min"] = "must not exceed global_batch_max"
        elif (attrs.get("min_batch_per_gpu") or 0) > attrs["global_batch_max"]:
            errors["min_batch_per_gpu"] = (
                f"a minimum of {attrs['min_batch_per_gpu']} per GPU is more than the largest global "
                f"batch, {attrs['global_batch_max']}: not even one GPU could get it; lower the "
                "minimum or raise the global batch max"
            )
        if not attrs.get("spot") and not attrs.get("on_demand"):
            errors["spot"] = "allow spot, on-demand or both"
        given = self.initial_data or {}
        if not errors and "global_batch_min" not in given and "global_batch_max" not in given:
            fit_default_batch_range(attrs)
        if not errors:
            errors.update(search_size_problems(attrs))
        if errors:
            raise serializers.ValidationError(errors)
        return attrs


class PlanWarningSerializer(serializers.Serializer[dict[str, Any]]):
    code = serializers.CharField(help_text="e.g. precision_mismatch")
    message = serializers.CharField()


class PlanTypeAssumptionSerializer(serializers.Serializer[dict[str, Any]]):
    gpu_model = serializers.CharField()
    instance_types = serializers.ListField(child=serializers.CharField())
    # the JSON key; DRF's metaclass takes it as a declared field, not as Field.source
    source = serializers.ChoiceField(choices=["measured", "transferred", "analytical"])  # type: ignore[assignment]
    source_text = serializers.CharField()
    error = serializers.DictField(
        help_text="planner.validated entry: validated, median_pct, p90_pct, n, bench"
    )
    error_text = serializers.CharField(help_text='e.g. "validated p90 error ±19.8% (...)" or "not validated"')
    support_text = serializers.CharField(
        required=False,
        help_text="the compute model's training rows on this GPU's chip and where its chip factor comes from",
    )


class PlanPrecisionAssumptionSerializer(serializers.Serializer[dict[str, Any]]):
    requested = serializers.CharField(allow_null=True)
    profile_ran = serializers.CharField(allow_null=True, help_text="null: no profile")
    planned = serializers.CharField(help_text="the precision predictions are made at")
    mismatch = serializers.BooleanField(
        help_text="the profile ran another precision than asked (e.g. amp from fp32)"
    )
    text = serializers.CharField()


class PlanAssumptionsSerializer(serializers.Serializer[dict[str, Any]]):
    """What the plans assume (planner.assumptions); also in result.assumptions."""

    types = PlanTypeAssumptionSerializer(many=True)
    scaling = serializers.DictField(help_text="error (validated error of multi-GPU scaling) and text")
    precision = PlanPrecisionAssumptionSerializer()
    data_loader = serializers.DictField(help_text="kind, rate_per_vcpu, measured, text")
    p90 = serializers.CharField(help_text="what the p90 time includes")
    model_error = serializers.DictField(
        required=False,
        help_text="sources (the LOPO model error per source) and text: the one line naming them; "
        "absent for older plans",
    )
    unpredicted = serializers.ListField(
        child=serializers.DictField(),
        required=False,
        help_text="GPU models of the allowed offers that no prediction covers: gpu_model, "
        "instance_types, reason (e.g. no compute peak in its datasheet row); absent for older plans",
    )


class PlanQueuedSerializer(serializers.Serializer[dict[str, Any]]):
    id = serializers.IntegerField()
    url = serializers.URLField(help_text="the plan (also the Location header)")
    status = serializers.CharField(help_text="queued")
    progress_url = serializers.URLField(help_text="status and progress only, for polling")
    page = serializers.URLField(help_text="the plan's web page")


class PlanProgressSerializer(serializers.Serializer[dict[str, Any]]):
    """A plan's state (``planner.app.solving.status_message``): also what ``ws/plans/<id>/``
    sends."""

    type = serializers.CharField(help_text="status (snapshot: the websocket's first message)")
    id = serializers.IntegerField()
    status = serializers.ChoiceField(choices=PlanStatus.choices)
    finished = serializers.BooleanField(help_text="solved, infeasible, failed or cancelled")
    phase = serializers.CharField(help_text="model, candidates, search, verify, alternatives, baselines")
    evaluated = serializers.IntegerField(help_text="configurations evaluated so far")
    estimated_total = serializers.IntegerField(
        help_text="estimated configurations in all (grows as the search goes)"
    )
    fraction = FloatField()
    attempts = serializers.IntegerField(help_text="workers that took the plan (more than 1: one died)")
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    heartbeat_at = serializers.DateTimeField(allow_null=True)
    stale = serializers.BooleanField(
        help_text="running, but its worker has not answered for longer than PLAN_LEASE_S; the "
        "workers' recovery will queue it again (or fail it), reads never change it"
    )
    notice = serializers.CharField(
        allow_blank=True, help_text="what happens to a stale plan; empty otherwise"
    )
    error = serializers.CharField(allow_blank=True)
    error_field = serializers.CharField(allow_blank=True, help_text="the request field a failure is about")
    binding_constraint = serializers.CharField(allow_blank=True)
    url = serializers.CharField()
    page = serializers.CharField()
    detail = serializers.CharField(required=False, help_text="why a cancel was refused")


class PlanBandSerializer(serializers.Serializer[dict[str, Any]]):
    """A ranked plan's p10/p50/p90 time and cost (also in result.plans[i]): the simulator's spread
    with the validated model error of its prediction source (planner.validated); null for plans
    solved before the bands existed."""

    rank = serializers.IntegerField()
    label = serializers.CharField()  # type: ignore[assignment]  # the JSON key, as source above
    time_p10_h = FloatField(allow_null=True)
    time_p50_h = FloatField(allow_null=True)
    time_p90_h = FloatField(allow_null=True, help_text="what the deadline-miss risk is checked on")
    cost_p10_usd = MoneyField(decimal_places=MONEY_TREE_PLACES, allow_null=True)
    cost_p50_usd = MoneyField(decimal_places=MONEY_TREE_PLACES, allow_null=True)
    cost_p90_usd = MoneyField(decimal_places=MONEY_TREE_PLACES, allow_null=True)
    iter_time_p10_s = FloatField(allow_null=True)
    iter_time_p50_s = FloatField(allow_null=True)
    iter_time_p90_s = FloatField(allow_null=True)
    model_error = serializers.DictField(
        allow_null=True,
        help_text='{"validated": false, "source": ...} or the LOPO quantiles q10/q50/q90 of '
        "ln(measured/predicted), n, bench, measured_at",
    )


BAND_FIELDS = tuple(PlanBandSerializer().fields)


def _band(row: PlanRow) -> dict[str, Any]:
    """A plan row's :class:`PlanBandSerializer` fields (None where an older row has none)."""
    return {"rank": row.rank, "label": row.label, **row.band, "model_error": row.model_error}


class PlanSerializer(ModelSerializer):
    owner: serializers.SlugRelatedField[User] = serializers.SlugRelatedField(
        slug_field="username", read_only=True
    )
    warnings = serializers.SerializerMethodField(
        help_text="What to know about how the plan was predicted "
        "(also in result.warnings); empty for older plans"
    )
    assumptions = serializers.SerializerMethodField(
        help_text="What the plans assume (also in result.assumptions); null for older plans"
    )
    mix_reasons = serializers.SerializerMethodField(
        help_text="Rank -> why that mixed plan beats its types alone (also in result.mix_reasons)"
    )
    bands = serializers.SerializerMethodField(help_text="p10/p50/p90 time and cost of each ranked plan")
    constraints_from_task = serializers.SerializerMethodField(
        help_text="The constraints the request's task file set: field (the file's key), value, line, "
        "means; empty for a plan made without a task file"
    )

    class Meta:
        model = PlanRecord
        extra_kwargs = {
            "request": {"help_text": f"The request as validated; {MONEY_TREE_NOTE}"},
            "result": {
                "help_text": "plans, alternatives, baselines, pareto, points, ... (null until solved); "
                f"{MONEY_TREE_NOTE}"
            },
        }
        fields = [
            "id",
            "name",
            "owner",
            "status",
            "phase",
            "progress_evaluated",
            "progress_total",
            "attempts",
            "request",
            "result",
            "error",
            "error_field",
            "binding_constraint",
            "solve_time_s",
            "created_at",
            "started_at",
            "finished_at",
            "profile_run",
            "warnings",
            "assumptions",
            "mix_reasons",
            "bands",
            "constraints_from_task",
        ]
        read_only_fields = fields

    def to_representation(self, instance: PlanRecord) -> dict[str, Any]:
        """The stored request and result with their money as decimal strings (the API's rule;
        the stored JSON and the pages keep numbers)."""
        data = super().to_representation(instance)
        for key in ("request", "result"):
            data[key] = money_tree(data.get(key))
        return data

    @extend_schema_field(PlanBandSerializer(many=True))
    def get_bands(self, obj: PlanRecord) -> list[dict[str, Any]]:
        bands: list[dict[str, Any]] = money_tree([_band(row) for row in PlanResult.read(obj.result).plans])
        return bands

    @extend_schema_field(serializers.ListField(child=serializers.DictField()))
    def get_constraints_from_task(self, obj: PlanRecord) -> list[dict[str, Any]]:
        return list((obj.request or {}).get("constraints_from_task") or [])

    @extend_schema_field(PlanWarningSerializer(many=True))
    def get_warnings(self, obj: PlanRecord) -> list[dict[str, Any]]:
        return [w.to_json() for w in PlanResult.read(obj.result).warnings]

    @extend_schema_field(PlanAssumptionsSerializer(allow_null=True))
    def get_assumptions(self, obj: PlanRecord) -> dict[str, Any] | None:
        assumptions = PlanResult.read(obj.result).assumptions
        return dict(assumptions) if assumptions is not None else None

    @extend_schema_field(serializers.DictField(child=serializers.CharField()))
    def get_mix_reasons(self, obj: PlanRecord) -> dict[str, Any]:
        return dict(PlanResult.read(obj.result).mix_reasons)


class PlanSummarySerializer(ModelSerializer):
    owner: serializers.SlugRelatedField[User] = serializers.SlugRelatedField(
        slug_field="username", read_only=True
    )
    best = serializers.SerializerMethodField(
        help_text="The first ranked plan: label, total_usd, time_h, hourly_usd and its p10/p50/p90 "
        f"time and cost (null: none); {MONEY_TREE_NOTE}"
    )

    class Meta:
        model = PlanRecord
        fields = [
            "id",
            "name",
            "owner",
            "status",
            "progress_evaluated",
            "progress_total",
            "binding_constraint",
            "solve_time_s",
            "created_at",
            "finished_at",
            "best",
        ]
        read_only_fields = fields

    def get_best(self, obj: PlanRecord) -> dict[str, Any] | None:
        best = PlanResult.read(obj.result).best
        if best is None:
            return None
        shown: dict[str, Any] = money_tree(
            {
                "label": best.label,
                "total_usd": best.total_usd,
                "time_h": best.time_h,
                "hourly_usd": best.hourly_usd,
                **{k: best.band[k] for k in TIME_COST_BAND_KEYS},
            }
        )
        return shown
