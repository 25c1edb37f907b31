"""Srifty's one boundary to AWS: the only code in the project that imports boto3 or botocore.

A plain package (no Django). ``cloud.session`` makes every client (one retry policy, the
configured endpoint); ``cloud.errors.CloudError`` is the one error every failed call raises,
carrying AWS's code; ``cloud.tags`` names the install on every resource. The services:

* ``cloud.ec2``: instances, launch templates, placement groups, EFA interfaces, images,
  subnets, zones, instance-type specs;
* ``cloud.pricing``: spot price history and on-demand prices (Price List API);
* ``cloud.account``: STS caller identity, service quotas and SSM parameters.
"""

from cloud.errors import CloudError
from cloud.session import RETRY, CloudSettings, client, configure, current
from cloud.tags import CLIENT_TOKEN_TAG, INSTALL_TAG, MANAGED_TAG, resource_tags

__all__ = [
    "CLIENT_TOKEN_TAG",
    "INSTALL_TAG",
    "MANAGED_TAG",
    "RETRY",
    "CloudError",
    "CloudSettings",
    "client",
    "configure",
    "current",
    "resource_tags",
]
