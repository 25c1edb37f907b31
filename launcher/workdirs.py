"""A task's local workdir on its way to the nodes: packed here, fetched by every node.

``manage.py launch`` packs the folder (``pack``: a gzip tarball, without ``.git``, caches and
virtual environments, at most ``MAX_ARCHIVE_BYTES``) and stores it either under
``SRIFTY_DATA_DIR/workdirs/`` (served with the job token at ``GET
/api/v1/jobs/{id}/workdir.tar.gz``) or, with ``JOB_WORKDIR_S3 = "s3://bucket/prefix"``, in S3
(the nodes get a presigned URL that lasts until the job's cap). ``Job.workdir_archive`` holds the
file name or the ``s3://`` URL.
"""

from __future__ import annotations

import hashlib
import io
import re
import tarfile
from pathlib import Path

from django.conf import settings

from cloud import s3

MAX_ARCHIVE_BYTES = 200 * 1024 * 1024
SKIPPED = {
    ".git",
    "__pycache__",
    ".venv",
    "venv",
    "node_modules",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
}
NAME_RE = re.compile(r"^[0-9a-f]{64}\.tar\.gz$")


def _skip(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    if SKIPPED.intersection(Path(info.name).parts) or not (info.isfile() or info.isdir()):
        return None  # no links or devices either: nothing outside the folder travels
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def pack(folder: Path) -> bytes:
    """The folder's contents as a gzip tarball (names relative to the folder)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for child in sorted(folder.iterdir()):
            tar.add(child, arcname=child.name, filter=_skip)
    data = buf.getvalue()
    if len(data) > MAX_ARCHIVE_BYTES:
        raise ValueError(
            f"the workdir packs to {len(data)} bytes; at most {MAX_ARCHIVE_BYTES} (use git: or S3 data)"
        )
    return data


def store(data: bytes, region: str) -> str:
    """Keep an archive where the nodes can fetch it; returns what ``Job.workdir_archive`` holds."""
    name = f"{hashlib.sha256(data).hexdigest()}.tar.gz"
    target = getattr(settings, "JOB_WORKDIR_S3", "") or ""
    if target:
        bucket, _, prefix = target.removeprefix("s3://").partition("/")
        key = f"{prefix.strip('/')}/{name}" if prefix.strip("/") else name
        s3.put_object(region, bucket, key, data)
        return f"s3://{bucket}/{key}"
    folder = Path(settings.DATA_DIR) / "workdirs"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(data)
    return name


def archive_path(name: str) -> Path | None:
    """The stored archive called ``name`` (None for an S3 URL or a name that is not ours)."""
    if not NAME_RE.match(name):
        return None
    return Path(settings.DATA_DIR) / "workdirs" / name


def download_url(archive: str, region: str, job_id: int, expires_s: int) -> str:
    """Where the nodes fetch ``archive``: a presigned S3 URL, or Srifty's own (job token)."""
    if archive.startswith("s3://"):
        bucket, _, key = archive.removeprefix("s3://").partition("/")
        return s3.presigned_get(region, bucket, key, expires_s)
    return f"{settings.SITE_URL.rstrip('/')}/api/v1/jobs/{job_id}/workdir.tar.gz"
