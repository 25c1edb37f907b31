"""Explicit serializers for jobs, their launch confirmation, agent reports and re-plans."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.contrib.auth.models import User
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from launcher import envvalues, interruptions, jobs, monitor, taskfile
from launcher.models import Job, JobEvent
from srifty_web.fields import FloatField
from srifty_web.money import MONEY_NOTE, MONEY_TREE_NOTE, MoneyField, money, money_help, money_tree
from srifty_web.serializers import ModelSerializer

MAX_REPORTS_PER_POST = 1000
MAX_SEQ = 2**62
MAX_ID = 2**63 - 1


class EnvValuesField(serializers.DictField):
    """``{NAME: value}``: strings only (a number or a boolean is refused, not turned into text),
    checked by ``envvalues.check_values``."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(child=serializers.CharField(allow_blank=True, trim_whitespace=False), **kwargs)

    def to_internal_value(self, data: Any) -> dict[str, str]:
        try:
            return envvalues.check_values(data)
        except envvalues.EnvValueError as exc:
            raise serializers.ValidationError(exc.problems) from exc


class LaunchParamsSerializer(serializers.Serializer[dict[str, Any]]):
    """What a launch needs: the plan option, the training command and the caps."""

    plan = serializers.IntegerField(min_value=1, max_value=MAX_ID, help_text="PlanRecord id")
    rank = serializers.IntegerField(min_value=1, max_value=10_000, help_text="Option of the plan (its rank)")
    train_command = serializers.CharField(
        max_length=jobs.MAX_TRAIN_COMMAND,
        trim_whitespace=True,
        required=False,
        allow_blank=True,
        default="",
        help_text="Script and arguments after torchrun, e.g. train.py --epochs 3 (required without task)",
    )
    task = serializers.CharField(
        max_length=taskfile.MAX_TASK_BYTES,
        required=False,
        allow_blank=True,
        default="",
        trim_whitespace=False,
        help_text="A task file (Srifty's YAML or SkyPilot's) instead of train_command; "
        "errors come back as task: [{line, field, message}]",
    )
    image_id = serializers.CharField(
        max_length=32,
        required=False,
        allow_blank=True,
        default="",
        help_text="A custom AMI instead of the DLAMI",
    )
    max_spend_usd = serializers.DecimalField(
        max_digits=12, decimal_places=2, min_value=Decimal("0.01"), max_value=jobs.MAX_SPEND_USD
    )
    max_hours = FloatField(min_value=0.01, max_value=jobs.MAX_HOURS)
    workdir_archive = serializers.FileField(
        required=False,
        allow_null=True,
        allow_empty_file=False,
        max_length=255,
        help_text="The task's local workdir folder as a .tar.gz/.tgz or .zip (multipart only): "
        "regular files and folders, relative names; at most JOB_WORKDIR_MAX_MB. The "
        "confirmation binds its digest, so send the same file to POST /jobs/",
    )
    env = EnvValuesField(
        required=False,
        default=dict,
        help_text="Values for the task file's envs and secrets, {NAME: value} (multipart: env.NAME "
        "fields), as sky launch --env / --secret: required for each the file writes null, "
        "optional for the others, refused for a name the file does not declare. Strings of one "
        f"line, at most {envvalues.MAX_ENV_VALUE_CHARS} characters; a secret's (or a credential-like "
        f"env name's) at least {envvalues.MIN_HIDDEN_CHARS}. Never shown back (the task file is "
        "shown with them redacted); send the same values to POST /jobs/ (the confirmation binds them)",
    )

    def validate_task(self, value: str) -> str:
        # A browser's multipart form sends text fields with CRLF line breaks (the HTML spec's
        # normalization); the task file is the same file either way, and the job keeps it as such.
        return value.replace("\r\n", "\n")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        """The task with the values given at launch written in (``envvalues.with_values``): what
        the confirmation binds and the job keeps. A task with errors is left as sent: the launch
        reports them with their lines."""
        values = attrs.get("env") or {}
        if not values:
            return attrs
        if not attrs.get("task", "").strip():
            raise serializers.ValidationError(
                {"env": [f"{', '.join(values)}: values for a task file's envs, and there is no task file"]}
            )
        try:
            attrs["task"] = envvalues.with_values(attrs["task"], values)
        except envvalues.EnvValueError as exc:
            raise serializers.ValidationError({"env": exc.problems}) from exc
        except taskfile.TaskFileError:
            pass
        return attrs

    def validate_train_command(self, value: str) -> str:
        task = self.initial_data.get("task") if hasattr(self.initial_data, "get") else None
        if not value and not (isinstance(task, str) and task.strip()):
            raise serializers.ValidationError("the training command is required (or a task file in task)")
        return value


class PrecheckParamsSerializer(serializers.Serializer[dict[str, Any]]):
    plan = serializers.IntegerField(min_value=1, max_value=MAX_ID, help_text="PlanRecord id")
    rank = serializers.IntegerField(min_value=1, max_value=10_000, help_text="Option of the plan (its rank)")


class PrecheckSerializer(serializers.Serializer[dict[str, Any]]):
    name = serializers.CharField(help_text="credentials, quota, offering or subnet")
    status = serializers.ChoiceField(choices=["ok", "warning", "error"])
    message = serializers.CharField()
    fix = serializers.CharField(allow_blank=True)


class PrechecksSerializer(serializers.Serializer[dict[str, Any]]):
    ok = serializers.BooleanField(help_text="false: an error below stops the launch")
    region = serializers.CharField()
    checks = PrecheckSerializer(many=True)


class CreateJobSerializer(LaunchParamsSerializer):
    confirmation = serializers.CharField(max_length=2000, help_text="The id POST /jobs/preview/ returned")


class LaunchInstanceSerializer(serializers.Serializer[dict[str, Any]]):
    instance_type = serializers.CharField()
    count = serializers.IntegerField()
    market = serializers.CharField()
    zone = serializers.CharField(allow_null=True)
    gpus_per_node = serializers.IntegerField()
    gpu_model = serializers.CharField()
    batch_per_node = serializers.IntegerField()
    price_per_hour = MoneyField(decimal_places=4, help_text="USD per instance-hour")
    hourly_usd = MoneyField(decimal_places=4, help_text="USD per hour of these instances (count x price)")


class WorkdirArchiveSerializer(serializers.Serializer[dict[str, Any]]):
    name = serializers.CharField()
    bytes = serializers.IntegerField(help_text="As uploaded")
    sha256 = serializers.CharField(help_text="Of the uploaded bytes (the confirmation binds it)")
    files = serializers.IntegerField(help_text="Regular files in it")


class PreviewSerializer(serializers.Serializer[dict[str, Any]]):
    """The exact launch a confirmation id stands for."""

    plan = serializers.IntegerField()
    rank = serializers.IntegerField()
    region = serializers.CharField()
    label: serializers.CharField = serializers.CharField()  # type: ignore[assignment]  # a field named like Field.label
    instances = LaunchInstanceSerializer(many=True)
    nodes = serializers.IntegerField()
    gpus = serializers.IntegerField()
    hourly_usd = MoneyField(decimal_places=4, help_text="USD per hour of the whole cluster")
    max_spend_usd = MoneyField(decimal_places=2, help_text="min(max spend, $/h x max hours)")
    cap_hours = FloatField(help_text="When the cluster is stopped at the latest")
    predicted_iter_s = FloatField()
    predicted_iter_p90_s = FloatField()
    predicted_time_h = FloatField(allow_null=True)
    global_batch = serializers.IntegerField(allow_null=True)
    placement_group = serializers.CharField()
    train_command = serializers.CharField(allow_blank=True)
    task = serializers.CharField(
        allow_blank=True,
        required=False,
        help_text="The task file launched, with the values given at launch; secrets and credential-like "
        "env values redacted",
    )
    image_id = serializers.CharField(allow_blank=True, required=False, help_text="A custom AMI, if any")
    task_notes = serializers.ListField(
        child=serializers.CharField(),
        required=False,
        help_text="Where a SkyPilot file's request and the plan differ",
    )
    env = serializers.ListField(
        child=serializers.CharField(),
        required=False,
        help_text="The names given values at launch (env); the values are never shown back",
    )
    workdir_archive = WorkdirArchiveSerializer(
        required=False, allow_null=True, help_text="The uploaded workdir archive, checked"
    )
    requested = serializers.DictField(
        help_text="max_spend_usd (a decimal string) and max_hours to send back with the confirmation"
    )
    confirmation = serializers.CharField()
    confirmation_expires_s = serializers.IntegerField()
    replaces = serializers.IntegerField(required=False, help_text="Re-plans: the job this one replaces")
    remaining_samples = FloatField(required=False, help_text="Re-plans: the work that is left")
    offer = serializers.CharField(required=False, help_text="Re-plans: why and what was offered")


class JobEventSerializer(ModelSerializer):
    class Meta:
        model = JobEvent
        fields = ["kind", "message", "data", "at"]


JOB_FIELDS = [
    "id",
    "owner",
    "plan",
    "plan_rank",
    "region",
    "status",
    "status_reason",
    "hourly_usd",
    "max_spend_usd",
    "max_hours",
    "spend_usd",
    "cap_at",
    "nodes",
    "predicted_iter_s",
    "predicted_iter_p90_s",
    "total_iterations",
    "drift_since",
    "created_at",
    "started_at",
    "finished_at",
]


class JobSerializer(ModelSerializer):
    owner: serializers.SlugRelatedField[User] = serializers.SlugRelatedField(
        slug_field="username", read_only=True
    )
    spend_usd = serializers.SerializerMethodField(
        help_text=money_help("Spend so far ($/h x hours since launch; 0 for a job that never started)")
    )
    hourly_usd = MoneyField(decimal_places=4, read_only=True, help_text="USD per hour of the whole cluster")
    max_spend_usd = MoneyField(
        decimal_places=2, read_only=True, help_text="The spend cap: min(max spend asked, $/h x max hours)"
    )
    cap_at = serializers.DateTimeField(read_only=True)
    nodes = serializers.SerializerMethodField()

    class Meta:
        model = Job
        fields = JOB_FIELDS
        read_only_fields = JOB_FIELDS

    @extend_schema_field(MoneyField(decimal_places=4))
    def get_spend_usd(self, job: Job) -> str | None:
        return money(jobs.spend_usd(job))  # as the job page says it: 0 when nothing started

    def get_nodes(self, job: Job) -> int:
        return job.plan_option.nodes


class JobDetailSerializer(JobSerializer):
    events = JobEventSerializer(many=True, read_only=True)
    task = serializers.CharField(
        source="task_shown",
        read_only=True,
        help_text="The task file launched, with the values given at launch (env) written in; the values "
        "of secrets and of credential-like envs (names with TOKEN, KEY, SECRET, ...) redacted",
    )
    observed = serializers.SerializerMethodField(help_text="Observed vs predicted iteration time")
    progress = serializers.SerializerMethodField()
    replan_offer = serializers.SerializerMethodField(
        help_text="The latest re-plan offer (message, at, plan, rank, remaining_samples, hourly_usd, "
        f"time_h, label) or null; hourly_usd: {MONEY_NOTE}"
    )
    resilience = serializers.SerializerMethodField(
        help_text="Checkpoints, interruptions and their cost, the deadline guard, the checkpoint interval; "
        f"cost_usd (in total and per interruption): {MONEY_NOTE}"
    )

    class Meta(JobSerializer.Meta):
        fields = [
            *JOB_FIELDS,
            "option",
            "train_command",
            "instance_ids",
            "node_ips",
            "placement_group",
            "security_group_id",
            "image_id",
            "image_source",
            "task",
            "events",
            "observed",
            "progress",
            "replan_offer",
            "resilience",
        ]
        read_only_fields = fields
        extra_kwargs = {
            "option": {"help_text": f"The plan row launched (a copy of result.plans[i]); {MONEY_TREE_NOTE}"}
        }

    def to_representation(self, instance: Job) -> dict[str, Any]:
        """The stored option (the plan's row, numbers) with its money as decimal strings."""
        data = super().to_representation(instance)
        data["option"] = money_tree(data.get("option"))
        return data

    def get_observed(self, job: Job) -> dict[str, Any]:
        return monitor.observed(job)

    def get_progress(self, job: Job) -> dict[str, Any]:
        return monitor.progress(job)

    def get_replan_offer(self, job: Job) -> dict[str, Any] | None:
        offer = monitor.latest_offer(job)
        if offer is None:
            return None
        out = {"message": offer.message, "at": offer.at, **offer.data}
        if "hourly_usd" in out:  # the event stores the plan's number
            out["hourly_usd"] = money(out["hourly_usd"])
        return out

    def get_resilience(self, job: Job) -> dict[str, Any]:
        summary = interruptions.summary(job)  # numbers, as the job page formats them
        for row in summary["interruptions"]:
            row["cost_usd"] = money(row["cost_usd"])
        summary["cost_usd"] = money(summary["cost_usd"])
        return summary


class CheckpointSerializer(serializers.Serializer[dict[str, Any]]):
    """A checkpoint the training wrote (``Reporter.checkpoint``)."""

    iteration = serializers.IntegerField(min_value=0, max_value=MAX_SEQ)
    samples = serializers.IntegerField(min_value=0, max_value=MAX_SEQ, required=False, allow_null=True)
    path = serializers.CharField(max_length=1024, required=False, allow_blank=True, default="")
    rank = serializers.IntegerField(min_value=0, max_value=1_000_000, default=0)


class SpotNoticeSerializer(serializers.Serializer[dict[str, Any]]):
    """A node's spot interruption notice, as IMDS gave it (``profiler.agent.spotwatch``)."""

    instance_id = serializers.RegexField(r"^i-[0-9a-f]{8,17}$", max_length=19)
    action = serializers.ChoiceField(choices=["terminate", "stop", "hibernate"], default="terminate")
    time = serializers.DateTimeField(required=False, allow_null=True, help_text="The notice's action time")


class ReportItemSerializer(serializers.Serializer[dict[str, Any]]):
    iteration = serializers.IntegerField(min_value=0, max_value=MAX_SEQ)
    iter_time_s = FloatField(min_value=0, max_value=3600)
    samples = serializers.IntegerField(min_value=0, max_value=10**9, required=False, allow_null=True)


class ReportBatchSerializer(serializers.Serializer[dict[str, Any]]):
    """``{"seq", "rank", "reports": [...]}``; report ``i`` has seq ``seq + i``."""

    seq = serializers.IntegerField(min_value=1, max_value=MAX_SEQ)
    rank = serializers.IntegerField(min_value=0, max_value=1_000_000)
    # many=True builds a ListSerializer, which takes max_length (the stubs type the child's kwargs)
    reports = ReportItemSerializer(many=True, allow_empty=False, max_length=MAX_REPORTS_PER_POST)  # type: ignore[call-arg]


class ReplanRequestSerializer(serializers.Serializer[dict[str, Any]]):
    refresh = serializers.BooleanField(default=False, help_text="Solve again even if an offer exists")
    max_spend_usd = serializers.DecimalField(
        max_digits=12,
        decimal_places=2,
        min_value=Decimal("0.01"),
        max_value=jobs.MAX_SPEND_USD,
        required=False,
    )
    max_hours = FloatField(min_value=0.01, max_value=jobs.MAX_HOURS, required=False)


class ApplyReplanSerializer(serializers.Serializer[dict[str, Any]]):
    plan = serializers.IntegerField(min_value=1, max_value=MAX_ID)
    rank = serializers.IntegerField(min_value=1, max_value=10_000)
    max_spend_usd = serializers.DecimalField(
        max_digits=12, decimal_places=2, min_value=Decimal("0.01"), max_value=jobs.MAX_SPEND_USD
    )
    max_hours = FloatField(min_value=0.01, max_value=jobs.MAX_HOURS)
    confirmation = serializers.CharField(max_length=2000)
