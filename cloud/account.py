"""The account side of AWS: who we are (STS), what we may run (Service Quotas), and public
parameters (SSM, e.g. the newest Deep Learning AMI's id)."""

from __future__ import annotations

from dataclasses import dataclass

from cloud import session
from cloud.errors import CloudError, call

__all__ = ["EC2_QUOTAS", "Identity", "caller_identity", "service_quota", "ssm_parameter"]

# Service Quotas codes of EC2's vCPU limits per instance family group (on-demand and spot).
EC2_QUOTAS = {
    ("on-demand", "P"): "L-417A185B",
    ("on-demand", "G"): "L-DB2E81BA",
    ("spot", "P"): "L-7212CCBC",
    ("spot", "G"): "L-3819A6DF",
}


@dataclass(frozen=True)
class Identity:
    account: str
    arn: str
    user_id: str


def caller_identity(region: str) -> Identity:
    """The account and principal the configured credentials belong to."""
    resp = call(session.client("sts", region), "get_caller_identity")
    return Identity(account=resp["Account"], arn=resp["Arn"], user_id=resp["UserId"])


def service_quota(region: str, service_code: str, quota_code: str) -> float | None:
    """The applied value of a quota (e.g. ``ec2``, ``L-417A185B``), or None if AWS has none."""
    try:
        resp = call(
            session.client("service-quotas", region),
            "get_service_quota",
            ServiceCode=service_code,
            QuotaCode=quota_code,
        )
    except CloudError as exc:
        if exc.code == "NoSuchResourceException":
            return None
        raise
    value = resp.get("Quota", {}).get("Value")
    return None if value is None else float(value)


def ssm_parameter(region: str, name: str) -> str | None:
    """The value of an SSM parameter (e.g. ``/aws/service/deeplearning/ami/...``), or None."""
    try:
        resp = call(session.client("ssm", region), "get_parameter", Name=name)
    except CloudError as exc:
        if exc.code == "ParameterNotFound":
            return None
        raise
    return str(resp["Parameter"]["Value"])
