"""Plans and jobs for the tests of job pages, the job API and the job websocket: plan options
built from g5.xlarge groups, a user allowed to launch, a job taken to running without EC2, and
the session cookie that logs a browser in."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.contrib.auth.models import Permission
from django.test import Client

from launcher import jobs
from launcher.models import Job
from planner.app.models import PlanRecord


def g5_group(
    count: int = 2,
    *,
    market: str = "spot",
    zone: str | None = None,
    price: float = 0.5,
    batch: int = 32,
) -> dict[str, Any]:
    """One group of a plan option: ``count`` g5.xlarge (1 A10G each), ``batch`` samples per node."""
    return {
        "instance_type": "g5.xlarge",
        "market": market,
        "zone": zone,
        "count": count,
        "gpus_per_node": 1,
        "gpu_model": "A10G",
        "price_per_hour": price,
        "batch_per_node": [batch] * count,
        "interruption_bucket": 1,
    }


def g5_spot_option(**fields: Any) -> dict[str, Any]:
    """The option of the page tests: 2 x g5.xlarge spot at $0.50/h, 0.5 s per iteration
    predicted (p90 0.6 s); ``fields`` add to it or replace. A new dict each call, so a test that
    changes its option changes no other test's."""
    return {
        "rank": 1,
        "region": "us-east-1",
        "global_batch": 64,
        "hourly_usd": 1.0,
        "iter_time_s": 0.5,
        "iter_time_p90_s": 0.6,
        "time_h": 1.0,
        "throughput_sps": 10.0,
        "groups": [g5_group()],
        **fields,
    }


def may_launch(user):
    """``user`` with ``launcher.add_job``, read again from the database: Django caches a user's
    permissions on the instance on first use."""
    user.user_permissions.add(Permission.objects.get(codename="add_job", content_type__app_label="launcher"))
    return type(user).objects.get(pk=user.pk)


def solved_plan(owner, option: dict[str, Any], **request: Any) -> PlanRecord:
    """A solved plan of ``owner`` whose only option is ``option``, for the request ``request``."""
    return PlanRecord.objects.create(
        owner=owner, request=request, status="solved", result={"plans": [option]}
    )


def running_job(owner, plan: PlanRecord, instance_ids: list[str], node_ips: dict[str, str | None]) -> Job:
    """A confirmed job of ``plan``'s first option ($10 cap, 5 h), marked launched on
    ``instance_ids`` and running, without EC2."""
    job = jobs.create_job(owner, plan, 1, "train.py", Decimal("10"), 5, confirm=True)
    jobs.mark_launched(job, instance_ids=instance_ids, node_ips=node_ips)
    return jobs.mark_running(job, "launched")


def browser_session_cookie(user, live_server_url: str) -> dict[str, str]:
    """The session cookie of ``user``, logged in, for Playwright's ``context.add_cookies`` on
    the live server at ``live_server_url``. Take it before ``sync_playwright()`` starts: the
    login writes a session, and the ORM refuses a thread where an event loop runs."""
    login = Client()
    login.force_login(user)
    return {
        "name": "sessionid",
        "value": login.cookies["sessionid"].value,
        "domain": live_server_url.split("//")[1].split(":")[0],
        "path": "/",
    }


def g5_launch_option(
    rank: int = 1, count: int = 2, market: str = "spot", price: float = 0.5, iter_s: float = 0.5
) -> dict[str, Any]:
    """An option the launcher launches and watches: ``count`` g5.xlarge in us-east-1a, 64
    samples per node, ``iter_s`` per iteration predicted (p90 20 % more), 2 h (p90 2.5 h)."""
    return {
        "rank": rank,
        "region": "us-east-1",
        "global_batch": 64 * count,
        "nodes": count,
        "gpus": count,
        "groups": [g5_group(count, market=market, zone="us-east-1a", price=price, batch=64)],
        "hourly_usd": price * count,
        "total_usd": price * count * 2,
        "time_h": 2.0,
        "time_p90_h": 2.5,
        "throughput_sps": 100.0,
        "iter_time_s": iter_s,
        "iter_time_p90_s": iter_s * 1.2,
        "bottleneck": "compute",
        "why": "cheapest",
    }
