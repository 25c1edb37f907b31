"""Profiling-run requests shared by tests."""

from __future__ import annotations

# A compute run on one EC2 VM (a paid action: permission and AWS pre-checks apply), as the API
# and the profiling form take it.
EC2_RUN = {
    "kind": "compute",
    "model_spec": "torchvision:resnet18",
    "input_shape": "3,32,32",
    "provider": "ec2",
    "instance_type": "g5.xlarge",
    "region": "us-east-1",
}

# The same run on this machine instead (nothing rented).
LOCAL_RUN = {k: v for k, v in EC2_RUN.items() if k not in ("provider", "instance_type", "region")}
