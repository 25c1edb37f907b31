"""S3 for Srifty: task workdir archives the nodes download through presigned URLs."""

from __future__ import annotations

from cloud import session
from cloud.errors import call, translated

__all__ = ["MAX_PRESIGN_S", "presigned_get", "put_object"]

MAX_PRESIGN_S = 7 * 24 * 3600  # SigV4 presigned URLs live at most a week


def put_object(region: str, bucket: str, key: str, data: bytes) -> None:
    call(session.client("s3", region), "put_object", Bucket=bucket, Key=key, Body=data)


def presigned_get(region: str, bucket: str, key: str, expires_s: int) -> str:
    """A URL that downloads ``s3://bucket/key`` without credentials for ``expires_s`` seconds."""
    seconds = max(60, min(int(expires_s), MAX_PRESIGN_S))
    cli = session.client("s3", region)
    with translated("s3.generate_presigned_url"):
        url: str = cli.generate_presigned_url(
            "get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=seconds
        )
    return url
