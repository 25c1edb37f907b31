"""What moto lacks for a launch, answered at the botocore boundary (``aws_hooks``).

moto's server runs every EC2 call it implements (instances, launch templates, security groups,
subnets, type offerings). It lacks, and these botocore ``before-call`` handlers answer:

* the placement-group calls (kept in memory; deleting a group whose instances are not all
  terminated is refused, as EC2 does);
* the public Deep Learning AMI SSM parameters (moto refuses to store names under ``/aws``):
  ``ssm`` maps parameter names to AMI ids, the test's fixture puts them there;
* EC2's vCPU quotas in Service Quotas (``quotas``: quota code -> value);
* a RunInstances failure on the N-th call (``fail_run_instances_at``).

Every request's parameters are recorded on the way out (``params``), since moto accepts but does
not echo what a launch asks for (EFA ``InterfaceType``, ``Placement.GroupName``).
"""

from __future__ import annotations

import json
from copy import deepcopy

import boto3
from botocore.awsrequest import AWSResponse

REGION = "us-east-1"
DLAMI_X86 = (
    "/aws/service/deeplearning/ami/x86_64/oss-nvidia-driver-gpu-pytorch-2.7-ubuntu-22.04/latest/ami-id"
)
DLAMI_ARM = "/aws/service/deeplearning/ami/arm64/oss-nvidia-driver-gpu-pytorch-2.7-ubuntu-22.04/latest/ami-id"


class LaunchAws:
    def __init__(self, endpoint: str):
        self.moto = boto3.client("ec2", region_name=REGION, endpoint_url=endpoint)
        self.calls: list[tuple[str, dict]] = []
        self.groups: dict[str, str] = {}
        self.members: dict[str, list[str]] = {}
        self.ssm: dict[str, str] = {}
        self.quotas: dict[str, float] = {}
        self.fail_run_instances_at: int | None = None  # 1-based RunInstances call to refuse
        self.run_instances_calls = 0

    def handlers(self) -> list[tuple[str, object]]:
        return [
            ("provide-client-params.ec2", self._record),
            ("provide-client-params.ssm", self._record),
            ("before-call.ec2.CreatePlacementGroup", self._create_group),
            ("before-call.ec2.DeletePlacementGroup", self._delete_group),
            ("before-call.ec2.RunInstances", self._run_instances),
            ("after-call.ec2.RunInstances", self._launched),
            ("before-call.ssm.GetParameter", self._get_parameter),
            ("before-call.service-quotas.GetServiceQuota", self._get_quota),
        ]

    def params(self, operation: str) -> list[dict]:
        return [p for name, p in self.calls if name == operation]

    def state(self, instance_id: str) -> str:
        found = self.moto.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]
        return found["State"]["Name"]

    # --- handlers --------------------------------------------------------------------------
    @staticmethod
    def _answer(status: int, parsed: dict):
        return AWSResponse("https://aws.example/", status, {}, None), parsed

    def _error(self, code: str, message: str, status: int = 400):
        return self._answer(status, {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {}})

    def _record(self, params, model, **kwargs):
        self.calls.append((model.name, deepcopy(params)))

    def _create_group(self, params, **kwargs):
        name = params["body"]["GroupName"]
        if name in self.groups:
            return self._error("InvalidPlacementGroup.Duplicate", f"group {name} exists")
        self.groups[name] = params["body"]["Strategy"]
        return self._answer(200, {"ResponseMetadata": {}})

    def _delete_group(self, params, **kwargs):
        name = params["body"]["GroupName"]
        if name not in self.groups:
            return self._error("InvalidPlacementGroup.Unknown", f"no group {name}")
        if any(self.state(i) != "terminated" for i in self.members.get(name, [])):
            return self._error("InvalidPlacementGroup.InUse", f"group {name} is in use")
        del self.groups[name]
        return self._answer(200, {"ResponseMetadata": {}})

    def _run_instances(self, params, **kwargs):
        self.run_instances_calls += 1
        if self.fail_run_instances_at == self.run_instances_calls:
            return self._error(
                "InsufficientInstanceCapacity", "We currently do not have sufficient capacity (test)"
            )
        group = params["body"].get("Placement.GroupName")
        if group and group not in self.groups:
            return self._error("InvalidPlacementGroup.Unknown", f"no group {group}")
        return None

    def _launched(self, parsed, model, **kwargs):
        request = self.params("RunInstances")[-1]
        group = (request.get("Placement") or {}).get("GroupName")
        if group:
            self.members.setdefault(group, []).extend(i["InstanceId"] for i in parsed.get("Instances", []))

    def _get_parameter(self, params, **kwargs):
        name = json.loads(params["body"])["Name"]
        if not name.startswith("/aws/"):
            return None  # moto's own
        if name not in self.ssm:
            return self._error("ParameterNotFound", f"Parameter {name} not found.")
        return self._answer(
            200,
            {
                "Parameter": {"Name": name, "Type": "String", "Value": self.ssm[name], "Version": 1},
                "ResponseMetadata": {},
            },
        )

    def _get_quota(self, params, **kwargs):
        code = json.loads(params["body"])["QuotaCode"]
        if code not in self.quotas:
            return self._error("NoSuchResourceException", f"no quota {code}")
        quota = {"ServiceCode": "ec2", "QuotaCode": code, "Value": self.quotas[code], "Unit": "None"}
        return self._answer(200, {"Quota": quota, "ResponseMetadata": {}})
