"""Launch ``examples/task.yaml`` on a moto server, end to end, and print what AWS was asked.

    .venv/bin/python examples/moto_launch.py

A throwaway Srifty (its own ``SRIFTY_DATA_DIR``: SQLite, the bundled catalog, one superuser)
talks to moto's real HTTP server on 127.0.0.1. What moto lacks is answered at the botocore
boundary, as in the tests (``tests/launcher/fake_aws.py``): EC2 placement groups, the public
Deep Learning AMI SSM parameters and EC2's vCPU quotas. Then:

1. ``manage.py plan`` solves a small plan (tiny model, us-east-1) and ``manage.py launch
   --plan N --option 1 --task examples/task.yaml --yes`` launches its option 1;
2. the same task on a stored 2 x p4d.24xlarge option (EFA: four network cards each).

For each, the RunInstances parameters, the job row and the node environment the rendezvous
answers with are printed.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    from moto.server import ThreadedMotoServer

    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    moto.start()
    server = moto._server
    assert server is not None  # started above
    host, port = str(server.server_address[0]), int(server.server_address[1])
    endpoint = f"http://{host}:{port}"
    data = tempfile.mkdtemp(prefix="srifty-moto-demo-")
    os.environ.update(
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_ENDPOINT_URL=endpoint,
        SRIFTY_DATA_DIR=data,
        SITE_URL="https://srifty.example.com",
        DJANGO_SETTINGS_MODULE="srifty_web.settings",
    )
    os.chdir(ROOT)
    import django

    django.setup()
    import logging

    logging.disable(logging.WARNING)
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from cloud import session
    from tests.launcher.fake_aws import DLAMI_ARM, DLAMI_X86, LaunchAws

    fake = LaunchAws(endpoint)
    fake.ssm[DLAMI_X86] = "ami-0a1b2c3d4e5f60718"  # the DLAMI ids as the public parameters would give them
    fake.ssm[DLAMI_ARM] = "ami-0f9e8d7c6b5a40312"
    fake.quotas.update({"L-417A185B": 384, "L-7212CCBC": 384, "L-DB2E81BA": 256, "L-3819A6DF": 256})
    real = session.client

    def client(service: str, region: str):
        made = real(service, region)
        for event, handler in fake.handlers():
            made.meta.events.register(event, handler)
        return made

    session.client = client
    print(f"moto on {endpoint}; data in {data}")
    call_command("migrate", verbosity=0)
    call_command("import_catalog", verbosity=0)
    get_user_model().objects.create_superuser("demo", password="demo-pass-123")

    print("\n$ manage.py plan --model torchvision:resnet18 ... --regions us-east-1")
    call_command(
        "plan", "--model", "torchvision:resnet18", "--input-shape", "3,64,64", "--samples", "200000",
        "--epochs", "3", "--objective", "cost", "--deadline-hours", "12", "--regions", "us-east-1",
        "--max-nodes", "4",
    )  # fmt: skip
    from planner.app.models import PlanRecord

    solved = PlanRecord.objects.latest("pk")
    launch_and_show(fake, solved.pk)

    stored = PlanRecord.objects.create(
        owner=get_user_model().objects.get(username="demo"),
        request={"objective": "cost"},
        status="solved",
        result={"plans": [p4d_option()]},
    )
    launch_and_show(fake, stored.pk)
    moto.stop()


def launch_and_show(fake, plan_id: int) -> None:
    from django.core.management import call_command

    from launcher import launch
    from launcher.models import Job

    before = len(fake.params("RunInstances"))
    print(f"\n$ manage.py launch --plan {plan_id} --option 1 --task examples/task.yaml --yes")
    call_command("launch", "--plan", str(plan_id), "--option", "1", "--task", "examples/task.yaml", "--yes")
    job = Job.objects.latest("pk")
    for run in fake.params("RunInstances")[before:]:
        nics = run.get("NetworkInterfaces") or []
        summary = {
            "InstanceType": template_type(fake, run["LaunchTemplate"]["LaunchTemplateId"])
            + " (its launch template's)",
            "Count": run["MinCount"],
            "Market": (run.get("InstanceMarketOptions") or {}).get("MarketType", "on-demand"),
            "ImageId": run["ImageId"],
            "Placement": run.get("Placement"),
            "SecurityGroupIds": run.get("SecurityGroupIds"),
            "SubnetId": run.get("SubnetId"),
            "NetworkInterfaces": [
                f"card {n['NetworkCardIndex']} dev {n['DeviceIndex']} {n['InterfaceType']} {n['SubnetId']} {n['Groups']}"
                for n in nics
            ],
        }
        print("RunInstances:", json.dumps({k: v for k, v in summary.items() if v}, indent=2))
    [template] = fake.moto.describe_launch_template_versions(LaunchTemplateId=job.launch_template_ids[0])[
        "LaunchTemplateVersions"
    ][-1:]
    print(
        "launch template",
        template["LaunchTemplateName"],
        "ImageId",
        template["LaunchTemplateData"]["ImageId"],
    )
    code, answer = launch.rendezvous(job, job.instance_ids[-1])
    env = answer["env"]
    keys = [
        k
        for k in sorted(env)
        if k.startswith(("MASTER", "NODE", "NNODES", "NPROC", "SKYPILOT", "SRIFTY_B", "FI_", "NCCL"))
    ]
    print(f"rendezvous of the last node (HTTP {code}):", json.dumps({k: env[k] for k in keys}, indent=2))


def template_type(fake, template_id: str) -> str:
    versions = fake.moto.describe_launch_template_versions(LaunchTemplateId=template_id)[
        "LaunchTemplateVersions"
    ]
    return str(versions[-1]["LaunchTemplateData"]["InstanceType"])


def p4d_option() -> dict:
    count = 2
    return {
        "rank": 1,
        "region": "us-east-1",
        "label": "2x p4d.24xlarge (on-demand, use1-az1)",
        "groups": [
            {
                "instance_type": "p4d.24xlarge",
                "market": "on-demand",
                "zone": "use1-az1",
                "count": count,
                "gpus_per_node": 8,
                "gpu_model": "A100",
                "price_per_hour": 21.96,
                "batch_per_node": [256] * count,
            }
        ],
        "global_batch": 256 * count,
        "hourly_usd": 21.96 * count,
        "time_h": 1.0,
        "time_p90_h": 1.2,
        "iter_time_s": 0.2,
        "iter_time_p90_s": 0.25,
        "throughput_sps": 2560.0,
    }


if __name__ == "__main__":
    main()
