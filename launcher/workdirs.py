"""A task's local workdir on its way to the nodes: packed here, fetched by every node.

``manage.py launch`` packs the folder (``pack``: a gzip tarball, without ``.git``, caches and
virtual environments, at most ``MAX_ARCHIVE_BYTES``) and stores it either under
``SRIFTY_DATA_DIR/workdirs/`` (served with the job token at ``GET
/api/v1/jobs/{id}/workdir.tar.gz``) or, with ``JOB_WORKDIR_S3 = "s3://bucket/prefix"``, in S3
(the nodes get a presigned URL that lasts until the job's cap). ``Job.workdir_archive`` holds the
file name or the ``s3://`` URL.

The web Launch dialog and the API cannot read the user's disk: they take the folder as an uploaded
archive (``workdir_archive``, .tar.gz/.tgz or .zip). ``check_upload`` spools it to a temporary
folder and has a bounded child process (``launcher.unpack``: address space, CPU and file size
rlimits, and a wall clock here) read it member by member, streaming: it refuses anything but
regular files and folders under relative, ``..``-free names (no links, devices, absolute paths),
more than ``MAX_MEMBERS`` members (a zip's count read from its end record first), PAX or GNU long
headers over a few KB, more than ``JOB_WORKDIR_MAX_MB`` packed, and more inflated bytes than
``unpacked_cap`` (counted at the decompressor, skipped members too), then repacks what it read into
the same gzip tarball ``pack`` makes, so one ``store`` and one fetch path serve both.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import re
import signal
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from django.conf import settings

from cloud import s3
from launcher import unpack
from launcher.unpack import MAX_NAME, SKIPPED  # noqa: F401  (one list for pack() and uploads)

MAX_ARCHIVE_BYTES = 200 * 1024 * 1024
MAX_MEMBERS = 10_000
UNPACKED_FACTOR = 4  # inflated bytes per uploaded byte: a small archive that fills a disk is refused
UNPACKED_FLOOR = 32 * 1024 * 1024  # ... but any upload may inflate to this many bytes
SPOOL_CHUNK = 1024 * 1024
UNPACK_SCRIPT = unpack.__file__  # run as a script in the child: standard library only
UPLOAD_SUFFIXES = (".tar.gz", ".tgz", ".zip")
NAME_RE = re.compile(r"^[0-9a-f]{64}\.tar\.gz$")


def _skip(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    if SKIPPED.intersection(Path(info.name).parts) or not (info.isfile() or info.isdir()):
        return None  # no links or devices either: nothing outside the folder travels
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def max_bytes() -> int:
    """The largest workdir archive, packed (``JOB_WORKDIR_MAX_MB``)."""
    return int(getattr(settings, "JOB_WORKDIR_MAX_MB", MAX_ARCHIVE_BYTES // (1024 * 1024))) * 1024 * 1024


def pack(folder: Path) -> bytes:
    """The folder's contents as a gzip tarball (names relative to the folder)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for child in sorted(folder.iterdir()):
            tar.add(child, arcname=child.name, filter=_skip)
    data = buf.getvalue()
    if len(data) > max_bytes():
        raise ValueError(
            f"the workdir packs to {len(data)} bytes; at most {max_bytes()} (use git: or S3 data)"
        )
    return data


# --- an uploaded archive (web dialog, API) ------------------------------------------------


class ArchiveError(ValueError):
    """An uploaded workdir archive that is refused; the message says why (API: 400 on
    ``workdir_archive``)."""


@dataclass(frozen=True)
class Upload:
    """A checked workdir archive: ``data`` is the repacked gzip tarball the nodes fetch,
    ``sha256`` the digest of the uploaded bytes (what a confirmation binds), ``files`` how many
    regular files it holds."""

    name: str
    size: int
    sha256: str
    data: bytes
    files: int

    def summary(self) -> dict[str, Any]:
        return {"name": self.name, "bytes": self.size, "sha256": self.sha256, "files": self.files}


def unpacked_cap(upload_bytes: int) -> tuple[int, str]:
    """How many bytes an upload of ``upload_bytes`` may inflate to (counted at the
    decompressor: skipped and duplicate members too), and the rule that set it:
    ``UNPACKED_FACTOR`` x the upload, at least ``UNPACKED_FLOOR`` (a tar's own headers and
    10 KiB record padding make a tiny upload inflate 50 x), at most ``UNPACKED_FACTOR`` x
    ``JOB_WORKDIR_MAX_MB``."""
    most = UNPACKED_FACTOR * max_bytes()
    cap = min(most, max(UNPACKED_FACTOR * upload_bytes, UNPACKED_FLOOR))
    why = (
        f"{UNPACKED_FACTOR} x the {upload_bytes}-byte upload, at least {UNPACKED_FLOOR} "
        f"and at most {UNPACKED_FACTOR} x JOB_WORKDIR_MAX_MB"
    )
    return cap, why


def check_timeout_s() -> int:
    """Wall-clock seconds the child that checks an upload may run (``JOB_WORKDIR_CHECK_TIMEOUT_S``)."""
    return int(getattr(settings, "JOB_WORKDIR_CHECK_TIMEOUT_S", 120))


def check_memory_bytes() -> int:
    """Address space of that child (``JOB_WORKDIR_CHECK_MEMORY_MB``)."""
    return int(getattr(settings, "JOB_WORKDIR_CHECK_MEMORY_MB", 512)) * 1024 * 1024


def _spool(stream: IO[bytes], path: Path, limit: int) -> tuple[int, str]:
    """Copy the upload to ``path`` in chunks: (its bytes, their sha256); never more than
    ``limit`` + 1 bytes are read."""
    digest, size = hashlib.sha256(), 0
    with path.open("wb") as fh:
        while size <= limit:
            chunk = stream.read(min(SPOOL_CHUNK, limit + 1 - size))
            if not chunk:
                break
            digest.update(chunk)
            size += len(chunk)
            fh.write(chunk)
    return size, digest.hexdigest()


def _repack_in_child(job: unpack.Job, name: str) -> dict[str, Any]:
    """Run ``launcher/unpack.py`` on ``job`` in a fresh interpreter (``-I``: no project or
    Django import, no environment), bounded by its own rlimits and by our wall clock. The web
    process only waits: it grows by the result, not by the archive."""
    argv = [sys.executable, "-I", UNPACK_SCRIPT, json.dumps(dataclasses.asdict(job))]
    try:
        done = subprocess.run(
            argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=check_timeout_s(), check=False
        )
    except subprocess.TimeoutExpired as exc:  # run() has killed the child
        raise ArchiveError(
            f"{name}: checking it took more than {check_timeout_s()} s (JOB_WORKDIR_CHECK_TIMEOUT_S)"
        ) from exc
    lines = done.stdout.decode(errors="replace").strip().splitlines()
    if done.returncode == 0 and lines:
        result: dict[str, Any] = json.loads(lines[-1])  # unpack.py prints one JSON object last
        return result
    err = done.stderr.decode(errors="replace")
    if "MemoryError" in err:
        return {"limit": "memory"}
    if done.returncode == -signal.SIGXCPU:
        raise ArchiveError(
            f"{name}: checking it took more than {check_timeout_s()} s of CPU (JOB_WORKDIR_CHECK_TIMEOUT_S)"
        )
    if done.returncode == -signal.SIGKILL:  # the CPU limit's hard step, or the kernel out of memory
        raise ArchiveError(
            f"{name}: checking it was stopped past its limits "
            "(JOB_WORKDIR_CHECK_TIMEOUT_S, JOB_WORKDIR_CHECK_MEMORY_MB)"
        )
    raise RuntimeError(f"the workdir archive check failed (exit {done.returncode}): {err[-2000:]}")


def check_upload(name: str, size: int, stream: IO[bytes]) -> Upload:
    """Read an uploaded workdir archive (``name`` as the client called it, ``size`` its bytes)
    and return it checked and repacked, or ArchiveError saying what is wrong. The upload is
    spooled to a private temporary folder and checked there by a bounded child process
    (``launcher.unpack``)."""
    name = Path(name or "").name
    limit = max_bytes()
    if not name.lower().endswith(UPLOAD_SUFFIXES):
        raise ArchiveError(f"{name or 'the file'}: must be a .tar.gz, .tgz or .zip archive of the folder")
    if size > limit:
        raise ArchiveError(f"{name} is {size} bytes; at most {limit} (JOB_WORKDIR_MAX_MB)")
    kind = "zip" if name.lower().endswith(".zip") else "tar"
    with tempfile.TemporaryDirectory(
        prefix="srifty-workdir-", dir=getattr(settings, "FILE_UPLOAD_TEMP_DIR", None)
    ) as tmp:
        src, dst = Path(tmp) / "upload", Path(tmp) / "repacked.tar.gz"
        got, sha256 = _spool(stream, src, limit)
        if got > limit:
            raise ArchiveError(f"{name} is over {limit} bytes (JOB_WORKDIR_MAX_MB)")
        with src.open("rb") as fh:
            magic = fh.read(2)
        if kind == "zip" and magic != b"PK":
            raise ArchiveError(f"{name} is not a zip archive")
        if kind == "tar" and magic != b"\x1f\x8b":
            raise ArchiveError(f"{name} is not a gzip-compressed tar archive")
        cap, cap_why = unpacked_cap(got)
        job = unpack.Job(
            kind=kind,
            src=str(src),
            dst=str(dst),
            cap=cap,
            cap_why=cap_why,
            limit=limit,
            max_members=MAX_MEMBERS,
            memory_bytes=check_memory_bytes(),
            cpu_s=check_timeout_s(),
        )
        result = _repack_in_child(job, name)
        if "refused" in result:
            raise ArchiveError(str(result["refused"]))
        if "limit" in result:
            raise ArchiveError(
                f"{name}: checking it needed more than {check_memory_bytes() // (1024 * 1024)} MB "
                "of memory (JOB_WORKDIR_CHECK_MEMORY_MB)"
            )
        if not result.get("kept"):
            raise ArchiveError(f"{name} is empty")
        packed = dst.read_bytes()
    return Upload(name, got, sha256, packed, int(result["files"]))


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
