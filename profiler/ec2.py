"""Moved: EC2 lives in ``cloud.ec2`` (the one module family that imports boto3). This name is
kept only while callers move over; new code imports ``cloud.ec2``."""

from cloud import session
from cloud.ec2 import *  # noqa: F403
from cloud.ec2 import __all__ as _cloud_all
from cloud.errors import CloudError as AwsError

client = session.client

__all__ = [*_cloud_all, "AwsError", "client"]
