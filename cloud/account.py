"""The account side of AWS: who we are (STS), what we may run (Service Quotas), and public
parameters (SSM, e.g. the newest Deep Learning AMI's id)."""

from __future__ import annotations

from dataclasses import dataclass

from cloud import session
from cloud.errors import CloudError, call

__all__ = ["EC2_QUOTAS", "Identity", "caller_identity", "quota_class", "service_quota", "ssm_parameter"]

# Service Quotas codes of EC2's vCPU limits per instance family group (on-demand and spot):
# "Running On-Demand <class> instances" and "All <class> Spot Instance Requests". HPC and High
# Memory (U) types are on-demand only.
EC2_QUOTAS = {
    ("on-demand", "P"): "L-417A185B",
    ("on-demand", "G"): "L-DB2E81BA",
    ("spot", "P"): "L-7212CCBC",
    ("spot", "G"): "L-3819A6DF",
    ("on-demand", "Inf"): "L-1945791B",
    ("spot", "Inf"): "L-B5D1601B",
    ("on-demand", "Trn"): "L-2C3B7624",
    ("spot", "Trn"): "L-6B0D517C",
    ("on-demand", "DL"): "L-6E869C2A",
    ("spot", "DL"): "L-85EED4F7",
    ("on-demand", "F"): "L-74FC7D96",
    ("spot", "F"): "L-88CF9481",
    ("on-demand", "X"): "L-7295265B",
    ("spot", "X"): "L-E3A00192",
    ("on-demand", "HPC"): "L-F7808C92",
    ("on-demand", "U"): "L-43DA4232",
    ("on-demand", "Standard"): "L-1216C47A",
    ("spot", "Standard"): "L-34B43A08",
}

# Family prefix -> quota class, longest first where one prefix starts another (dl before d,
# hpc before h, inf before i). G and VT share one quota.
_CLASSES = (
    ("trn", "Trn"),
    ("inf", "Inf"),
    ("dl", "DL"),
    ("hpc", "HPC"),
    ("vt", "G"),
    ("p", "P"),
    ("g", "G"),
    ("f", "F"),
    ("x", "X"),
    ("u", "U"),
)


def quota_class(instance_type: str) -> str:
    """The vCPU quota an instance type counts against, as AWS groups them: P, G (G and VT), F,
    X, Inf, Trn, DL, HPC and U (High Memory) have their own (``p5.48xlarge`` -> P, ``vt1.3xlarge``
    -> G, ``x2idn.16xlarge`` -> X, ``u-6tb1.metal`` -> U); Standard covers A, C, D, H, I, M, R, T
    and Z."""
    family = instance_type.split(".")[0].lower()
    for prefix, cls in _CLASSES:
        if family.startswith(prefix):
            return cls
    return "Standard"


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
