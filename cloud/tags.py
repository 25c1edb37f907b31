"""Tags that name Srifty's resources and the install that made them, applied by one helper.

Every resource ``cloud`` creates carries ``srifty:managed=true`` and ``srifty:install-id=<this
install's id>``, plus the caller's tags (``srifty:run-id``, ``srifty:job-id``...). The reconciler
finds Srifty's instances by the first, and acts only on this install's by the second.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from cloud import session
from cloud.errors import CloudError

__all__ = [
    "CLIENT_TOKEN_TAG",
    "INSTALL_TAG",
    "MANAGED_TAG",
    "as_dict",
    "install_id",
    "resource_tags",
    "tag_list",
    "tag_specifications",
]

MANAGED_TAG = "srifty:managed"
INSTALL_TAG = "srifty:install-id"
CLIENT_TOKEN_TAG = "srifty:client-token"


def install_id() -> str:
    found = session.current().install_id
    if not found:
        raise CloudError(
            "NoInstallId", "no install id configured (SRIFTY_INSTALL_ID or cloud.configure)", "cloud.tags"
        )
    return found


def resource_tags(
    extra: Mapping[str, object] | None = None, *, client_token: str | None = None
) -> dict[str, str]:
    """The caller's tags plus ``srifty:managed=true`` and this install's id, which always win."""
    merged = {str(k): str(v) for k, v in (extra or {}).items()}
    merged[MANAGED_TAG] = "true"
    merged[INSTALL_TAG] = install_id()
    if client_token:
        merged[CLIENT_TOKEN_TAG] = client_token
    return merged


def tag_list(tags: Mapping[str, str]) -> list[dict[str, str]]:
    """``{"k": "v"}`` -> ``[{"Key": "k", "Value": "v"}]`` as AWS wants them."""
    return [{"Key": k, "Value": v} for k, v in tags.items()]


def tag_specifications(tags: Mapping[str, str], kinds: Iterable[str]) -> list[dict[str, Any]]:
    """``TagSpecifications`` putting ``tags`` on each resource type in ``kinds``."""
    listed = tag_list(tags)
    return [{"ResourceType": kind, "Tags": listed} for kind in kinds]


def as_dict(item: Mapping[str, Any]) -> dict[str, str]:
    """The tags of a described resource as a dict."""
    return {t["Key"]: t["Value"] for t in item.get("Tags") or []}
