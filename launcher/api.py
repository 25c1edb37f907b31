"""REST endpoints of training jobs.

Users (token or session): ``GET /jobs/`` and ``/jobs/{id}/`` (team-visible),
``POST /jobs/preview/`` (the exact launch + a confirmation id), ``POST /jobs/`` (launch; needs
that confirmation id), ``POST /jobs/{id}/stop/``, ``POST /jobs/{id}/replan/`` (the re-plan
offer as a preview + confirmation id) and ``POST /jobs/{id}/replan/apply/``.

Nodes (``Authorization: Bearer <job token>``, valid for its own job only, dead when it ends):
``POST /jobs/{id}/reports/``, ``POST /jobs/{id}/checkpoints/`` (a checkpoint written),
``POST /jobs/{id}/interruptions/`` (a node's spot notice), ``GET /jobs/{id}/rendezvous/?instance_id=...`` and
``GET /jobs/{id}/agent.tar.gz`` (the profiler package, for ``profiler.agent.report``) and
``GET /jobs/{id}/workdir.tar.gz`` (the task's uploaded workdir).

``POST /jobs/precheck/`` asks AWS what it would refuse (credentials, quotas, offerings, subnets)
before the preview; ``preview`` and ``POST /jobs/`` ask it again (``launcher.prechecks``) and
answer a refusal with 400 ``{"prechecks": [{"name", "status", "message", "fix"}]}``: no
confirmation id, no job. ``preview`` and ``POST /jobs/`` take a task file's text in ``task`` (errors:
``{"task": [{"line", "field", "message"}]}``). A task whose ``workdir`` is a local folder needs
that folder as a multipart ``workdir_archive`` (.tar.gz/.tgz or .zip, ``launcher.workdirs``).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, ParamSpec

from django.conf import settings
from django.core.cache import cache
from django.db.models import QuerySet
from django.http import FileResponse, HttpResponse, HttpResponseBase
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import permissions, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import SimpleRateThrottle
from rest_framework.views import APIView

from fleet import api as fleet_api
from launcher import interruptions, jobs, launch, monitor, prechecks, skyexport, taskfile, workdirs
from launcher.models import Job
from launcher.serializers import (
    ApplyReplanSerializer,
    CheckpointSerializer,
    CreateJobSerializer,
    JobDetailSerializer,
    JobSerializer,
    LaunchParamsSerializer,
    PrecheckParamsSerializer,
    PrechecksSerializer,
    PreviewSerializer,
    ReplanRequestSerializer,
    ReportBatchSerializer,
    SpotNoticeSerializer,
)
from srifty_web.bearer import BearerTokenAuthentication
from srifty_web.http import refuse_size

MAX_REPORT_BYTES = 1024 * 1024
RANKS_PER_GPU = 8
DRIFT_CHECK_EVERY_S = 5


# --- agent authentication -----------------------------------------------------------------


class JobAgent:
    """Stands in for ``request.user`` on node requests: it may act on one job only."""

    is_authenticated = True

    def __init__(self, job: Job) -> None:
        self.job = job
        self.pk = f"agent-job-{job.pk}"


class JobTokenAuthentication(BearerTokenAuthentication):
    refused = "invalid or expired job token"

    def principal(self, token: str) -> JobAgent | None:
        job = Job.objects.filter(token_hash=Job.hash_token(token)).first()
        # A finished job's token is dead whatever its expiry says (``jobs.mark_launched`` re-arms
        # the expiry when a job stopped during its launch records its first instances).
        if job is None or job.finished or not job.token_matches(token):
            return None
        return JobAgent(job)


# drf-spectacular's registering __init_subclass__ is unannotated.
class JobTokenScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    target_class = "launcher.api.JobTokenAuthentication"
    name = "jobToken"

    def get_security_definition(self, auto_schema: AutoSchema) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer", "description": "The job's node token (in its user-data)"}


class IsAgentForThisJob(permissions.BasePermission):
    message = "this token belongs to another job"

    def has_permission(self, request: Request, view: APIView) -> bool:
        principal = request.user
        return isinstance(principal, JobAgent) and str(principal.job.pk) == str(view.kwargs.get("pk"))


class JobAgentThrottle(SimpleRateThrottle):
    """One bucket per job (every rank of every node shares it); generous by default."""

    scope = "job-agent"

    def get_rate(self) -> str:
        return str(getattr(settings, "JOB_AGENT_THROTTLE_RATE", "20000/min"))

    def get_cache_key(self, request: Request, view: APIView) -> str:
        return self.cache_format % {"scope": self.scope, "ident": request.user.pk}


def _agent_job(request: Request) -> Job:
    """The job of a node's request (``IsAgentForThisJob`` lets only its own agent through)."""
    principal = request.user
    if not isinstance(principal, JobAgent):
        raise PermissionDenied(IsAgentForThisJob.message)
    return principal.job


P = ParamSpec("P")

USED = OpenApiResponse(description='the confirmation already launched a job: {"detail", "job": its id}')


def _job_errors(view: Callable[P, HttpResponseBase]) -> Callable[P, HttpResponseBase]:
    """JobError -> 400 naming the field, NotAllowed -> 403, a used confirmation -> 409 naming
    the job it launched (``{"detail", "job"}``)."""

    @wraps(view)
    def wrapped(*args: P.args, **kwargs: P.kwargs) -> HttpResponseBase:
        try:
            return view(*args, **kwargs)
        except jobs.NotAllowed as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_403_FORBIDDEN)
        except jobs.ConfirmationUsed as exc:
            return Response({"detail": exc.message, "job": exc.job_id}, status=status.HTTP_409_CONFLICT)
        except jobs.JobError as exc:
            problems: list[object] = list(exc.details) if exc.details else [exc.message]
            return Response({exc.field: problems}, status=status.HTTP_400_BAD_REQUEST)

    return wrapped


# --- users --------------------------------------------------------------------------------


def _archive(v: dict[str, Any]) -> workdirs.Upload | None:
    """The checked ``workdir_archive`` upload of a launch request (None without one)."""
    upload = v.get("workdir_archive")
    if upload is None:
        return None
    try:
        return workdirs.check_upload(upload.name, upload.size, upload)
    except workdirs.ArchiveError as exc:
        raise jobs.JobError("workdir_archive", str(exc)) from exc


class JobViewSet(viewsets.ReadOnlyModelViewSet[Job]):
    """Launch training jobs from plan options and follow them (your team's jobs only)."""

    def get_queryset(self) -> QuerySet[Job]:
        return jobs.visible_jobs(self.request.user)

    def get_serializer_class(self) -> type[JobSerializer]:
        return JobDetailSerializer if self.action == "retrieve" else JobSerializer

    @extend_schema(request=LaunchParamsSerializer, responses={200: PreviewSerializer, 400: None, 403: None})
    @action(detail=False, methods=["post"])
    @_job_errors
    def preview(self, request: Request, *args: Any, **kwargs: Any) -> HttpResponseBase:
        """The exact instances, $/h, maximum spend and cap time of a launch, the AWS pre-checks
        it passed (``prechecks``), and the short-lived confirmation id that ``POST /jobs/`` needs
        to launch exactly that. A failed pre-check: 400 ``{"prechecks": [...]}`` with each fix."""
        if not jobs.can_launch(request.user):
            raise jobs.NotAllowed("launching a job needs the launcher.add_job permission")
        params = LaunchParamsSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        v = params.validated_data
        out = launch.prepare(
            request.user,
            v["plan"],
            v["rank"],
            v["train_command"],
            v["max_spend_usd"],
            v["max_hours"],
            task=v["task"],
            image_id=v["image_id"],
            archive=_archive(v),
        )
        # The task holds the values given at launch (``env``): shown as the job shows it, secrets
        # redacted, and the names given without their values.
        out["task"] = taskfile.redacted(out["task"])
        out["env"] = sorted(v["env"])
        return Response(out)

    @extend_schema(
        parameters=[
            OpenApiParameter("plan", int, required=True),
            OpenApiParameter("rank", int, required=True),
        ],
        responses={
            200: OpenApiResponse(description="a SkyPilot task file (YAML), or a zip of one per type"),
            400: None,
        },
    )
    @action(detail=False, methods=["get"], url_path="sky-export")
    @_job_errors
    def sky_export(self, request: Request, *args: Any, **kwargs: Any) -> HttpResponseBase:
        """A plan option as a SkyPilot task file, for ``sky launch`` (a mixed-type option: a zip
        with one file per instance type and a note)."""
        params = PrecheckParamsSerializer(data=request.query_params)
        params.is_valid(raise_exception=True)
        v = params.validated_data
        plan = launch._plan(request.user, v["plan"])
        option = jobs.plan_option(request.user, plan, v["rank"])
        name, data, kind = skyexport.download(option, plan.pk)
        response = HttpResponse(data, content_type=kind)
        response["Content-Disposition"] = f'attachment; filename="{name}"'
        return response

    @extend_schema(
        request=PrecheckParamsSerializer, responses={200: PrechecksSerializer, 400: None, 403: None}
    )
    @action(detail=False, methods=["post"])
    @_job_errors
    def precheck(self, request: Request, *args: Any, **kwargs: Any) -> HttpResponseBase:
        """Ask AWS what it would refuse before the confirmation: credentials (STS), the vCPU
        quota of each type class and market, the type's offering in the region and zone, and a
        subnet with room. ``ok`` false: a check failed; each says how to fix it."""
        if not jobs.can_launch(request.user):
            raise jobs.NotAllowed("launching a job needs the launcher.add_job permission")
        params = PrecheckParamsSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        v = params.validated_data
        plan = launch._plan(request.user, v["plan"])
        return Response(prechecks.summary(jobs.plan_option(request.user, plan, v["rank"])))

    @extend_schema(
        request=CreateJobSerializer, responses={201: JobDetailSerializer, 400: None, 403: None, 409: USED}
    )
    @_job_errors
    def create(self, request: Request, *args: Any, **kwargs: Any) -> HttpResponseBase:
        """Launch a previewed job; ``confirmation`` must match the preview's parameters and the
        AWS pre-checks must still pass (else 400 ``{"prechecks": [...]}``, no job). Each
        confirmation launches one job: a second use gets 409 with that job's id."""
        if not jobs.can_launch(request.user):
            raise jobs.NotAllowed("launching a job needs the launcher.add_job permission")
        params = CreateJobSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        v = params.validated_data
        job = launch.confirm_and_create(
            request.user,
            v["plan"],
            v["rank"],
            v["train_command"],
            v["max_spend_usd"],
            v["max_hours"],
            v["confirmation"],
            task=v["task"],
            image_id=v["image_id"],
            archive=_archive(v),
        )
        return Response(JobDetailSerializer(job).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={200: JobSerializer, 403: None})
    @action(detail=True, methods=["post"])
    @_job_errors
    def stop(self, request: Request, pk: str | None = None, **kwargs: Any) -> Response:
        job = self.get_object()
        if not jobs.can_stop(request.user, job):
            raise jobs.NotAllowed("only the owner (or launcher.change_job) may stop this job")
        job = jobs.stop_job(job, f"stopped by {request.user.get_username()}")
        return Response(JobSerializer(job).data)

    @extend_schema(request=ReplanRequestSerializer, responses={200: PreviewSerializer, 400: None, 403: None})
    @action(detail=True, methods=["post"])
    @_job_errors
    def replan(self, request: Request, pk: str | None = None, **kwargs: Any) -> Response:
        """The re-plan for the remaining work (solved now if none was offered yet) as a launch
        preview; apply it with ``POST /jobs/{id}/replan/apply/``."""
        job = self.get_object()
        if not jobs.can_launch(request.user):
            raise jobs.NotAllowed("launching a job needs the launcher.add_job permission")
        params = ReplanRequestSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        out = monitor.prepare_replan(request.user, job, **params.validated_data)
        out["task"] = taskfile.redacted(out.get("task", ""))  # the job's task holds its secrets
        return Response(out)

    @extend_schema(
        request=ApplyReplanSerializer, responses={201: JobDetailSerializer, 400: None, 403: None, 409: USED}
    )
    @action(detail=True, methods=["post"], url_path="replan/apply")
    @_job_errors
    def apply(self, request: Request, pk: str | None = None, **kwargs: Any) -> Response:
        """Stop this job's cluster and launch the confirmed re-plan option instead (a confirmation
        already applied: 409 with the job it launched)."""
        job = self.get_object()
        if not jobs.can_launch(request.user):
            raise jobs.NotAllowed("launching a job needs the launcher.add_job permission")
        params = ApplyReplanSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        v = params.validated_data
        new = launch.apply_replan(
            request.user, job, v["plan"], v["rank"], v["max_spend_usd"], v["max_hours"], v["confirmation"]
        )
        return Response(JobDetailSerializer(new).data, status=status.HTTP_201_CREATED)


# --- nodes --------------------------------------------------------------------------------


def job_world_size(job: Job) -> int:
    """Training processes of the job: torchrun starts ``gpus_per_node`` ranks on every node."""
    return job.plan_option.gpus


class JobAgentView(APIView):
    authentication_classes = [JobTokenAuthentication]
    permission_classes = [IsAgentForThisJob]
    throttle_classes = [JobAgentThrottle]


class JobReportsView(JobAgentView):
    """Where training processes post iteration times (``profiler.agent.report.Reporter``)."""

    @extend_schema(request=ReportBatchSerializer, responses={201: None, 200: None, 409: None, 413: None})
    def post(self, request: Request, pk: int) -> Response:
        if (refused := refuse_size(request, MAX_REPORT_BYTES, "post")) is not None:
            return refused
        batch = ReportBatchSerializer(data=request.data)
        batch.is_valid(raise_exception=True)
        data = batch.validated_data
        job = _agent_job(request)
        # Rows are unique per (job, rank, seq): ranks far outside the job would let one token store
        # without end. A few processes per GPU stay allowed (CPU-only training, e.g. gloo on a
        # 1-GPU node, runs several ranks per node).
        most = RANKS_PER_GPU * job_world_size(job)
        if data["rank"] >= most:
            return Response(
                {"rank": [f"this job has {job_world_size(job)} GPU(s): ranks 0..{most - 1}"]},
                status=status.HTTP_400_BAD_REQUEST,
            )
        try:
            stored = jobs.record_reports(job, data["rank"], data["seq"], data["reports"])
        except jobs.JobClosed as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
        if stored and cache.add(f"srifty-job-drift-{job.pk}", 1, timeout=DRIFT_CHECK_EVERY_S):
            monitor.check_drift(job)  # at most every few seconds per job, however many ranks post
        return Response(
            {"seq": data["seq"], "stored": stored, "duplicate": stored == 0},
            status=status.HTTP_201_CREATED if stored else status.HTTP_200_OK,
        )


class RendezvousView(JobAgentView, fleet_api.RendezvousView):
    """A job's node asks for its environment (``launcher.launch.rendezvous``)."""

    def answer(self, request: Request, pk: int, instance_id: str) -> tuple[int, dict[str, Any]]:
        return launch.rendezvous(Job.objects.get(pk=_agent_job(request).pk), instance_id)


class JobAgentTarballView(JobAgentView):
    """The profiler package for a node (so the training script can ``import profiler.agent.report``)."""

    @extend_schema(responses={200: OpenApiResponse(description="gzip tarball of profiler/agent")})
    def get(self, request: Request, pk: int) -> HttpResponse:
        from fleet.bundle import agent_tarball

        return HttpResponse(agent_tarball(), content_type="application/gzip")


class JobWorkdirView(JobAgentView):
    """The task's uploaded workdir (``manage.py launch`` packs the local folder) for a node."""

    @extend_schema(responses={200: OpenApiResponse(description="gzip tarball of the workdir"), 404: None})
    def get(self, request: Request, pk: int) -> HttpResponseBase:
        job = _agent_job(request)
        path = workdirs.archive_path(job.workdir_archive) if job.workdir_archive else None
        if path is None or not path.is_file():
            return Response({"detail": "this job has no uploaded workdir"}, status=status.HTTP_404_NOT_FOUND)
        return FileResponse(path.open("rb"), content_type="application/gzip")


class JobCheckpointsView(JobAgentView):
    """Where the training reports a checkpoint it wrote (``Reporter.checkpoint``): a replacement
    node resumes from the last one, and the job page lists them."""

    @extend_schema(request=CheckpointSerializer, responses={201: None, 200: None, 409: None})
    def post(self, request: Request, pk: int) -> Response:
        data = CheckpointSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        try:
            stored = interruptions.record_checkpoint(
                _agent_job(request), v["iteration"], samples=v.get("samples"), path=v["path"], rank=v["rank"]
            )
        except jobs.JobClosed as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
        return Response(
            {"iteration": v["iteration"], "stored": stored is not None},
            status=status.HTTP_201_CREATED if stored else status.HTTP_200_OK,
        )


class JobSpotNoticeView(JobAgentView):
    """Where a node's IMDS watcher reports its 2-minute spot notice; the next watch pass
    replaces the node (``launcher.interruptions``)."""

    @extend_schema(request=SpotNoticeSerializer, responses={201: None, 200: None, 403: None})
    def post(self, request: Request, pk: int) -> Response:
        data = SpotNoticeSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        job = Job.objects.get(pk=_agent_job(request).pk)
        when = v.get("time")
        stored, why = interruptions.record_notice(
            job, v["instance_id"], v["action"], when.isoformat() if when else ""
        )
        if not stored and why != "already reported":
            return Response({"instance_id": [why]}, status=status.HTTP_403_FORBIDDEN)
        return Response(
            {"stored": stored, "detail": why},
            status=status.HTTP_201_CREATED if stored else status.HTTP_200_OK,
        )
