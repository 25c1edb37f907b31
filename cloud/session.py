"""The one client factory: region, endpoint and retry policy for every AWS client Srifty makes.

No Django here. Where clients point and which install they tag for come from a provider set
with ``configure`` (the Django project registers one reading ``settings.AWS_ENDPOINT_URL`` and
``settings.INSTALL_ID``, see ``catalog.apps``); without one, from the environment
(``AWS_ENDPOINT_URL``, ``SRIFTY_INSTALL_ID``). The provider is read at every call, so a changed
setting (tests pointing at moto) takes effect at once. Credentials come only from boto3's normal
chain (environment, profile, instance role); nothing is stored.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from botocore.config import Config

__all__ = ["RETRY", "CloudSettings", "client", "configure", "current"]

# The one retry policy: botocore's adaptive mode backs off on throttling (RequestLimitExceeded)
# and retries transient errors (5xx, connection errors): 8 retries, so 9 attempts at most.
RETRY = Config(retries={"max_attempts": 8, "mode": "adaptive"}, connect_timeout=10, read_timeout=60)


@dataclass(frozen=True)
class CloudSettings:
    endpoint_url: str | None = None  # None: AWS's real endpoints
    install_id: str | None = None  # names this install in its resources' tags (cloud.tags)


def _from_environment() -> CloudSettings:
    return CloudSettings(
        endpoint_url=os.environ.get("AWS_ENDPOINT_URL") or None,
        install_id=os.environ.get("SRIFTY_INSTALL_ID") or None,
    )


_provider: Callable[[], CloudSettings] = _from_environment


def configure(provider: Callable[[], CloudSettings] | None) -> None:
    """Where settings come from from now on (``None``: the environment)."""
    global _provider
    _provider = provider or _from_environment


def current() -> CloudSettings:
    return _provider()


def client(service: str, region: str) -> Any:
    """A boto3 client for ``service`` in ``region`` with ``RETRY`` and the configured endpoint."""
    import boto3

    # S3 signs with SigV4: presigned URLs (workdir archives) work in every region with it.
    config = RETRY.merge(Config(signature_version="s3v4")) if service == "s3" else RETRY
    kwargs: dict[str, Any] = {"region_name": region, "config": config}
    endpoint = current().endpoint_url
    if endpoint:
        kwargs["endpoint_url"] = endpoint
    return boto3.client(service, **kwargs)
