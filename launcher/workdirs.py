"""A task's local workdir on its way to the nodes: packed here, fetched by every node.

``manage.py launch`` packs the folder (``pack``: a gzip tarball, without ``.git``, caches and
virtual environments, at most ``MAX_ARCHIVE_BYTES``) and stores it either under
``SRIFTY_DATA_DIR/workdirs/`` (served with the job token at ``GET
/api/v1/jobs/{id}/workdir.tar.gz``) or, with ``JOB_WORKDIR_S3 = "s3://bucket/prefix"``, in S3
(the nodes get a presigned URL that lasts until the job's cap). ``Job.workdir_archive`` holds the
file name or the ``s3://`` URL.

The web Launch dialog and the API cannot read the user's disk: they take the folder as an uploaded
archive (``workdir_archive``, .tar.gz/.tgz or .zip). ``check_upload`` reads it member by member
and refuses anything but regular files and folders under relative, ``..``-free names (no links,
devices, absolute paths), more than ``MAX_MEMBERS`` members, more than ``JOB_WORKDIR_MAX_MB`` packed
or ``UNPACKED_FACTOR`` times that unpacked, then repacks what it read into the same gzip tarball
``pack`` makes, so one ``store`` and one fetch path serve both.
"""

from __future__ import annotations

import calendar
import gzip
import hashlib
import io
import re
import stat
import struct
import tarfile
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO

from django.conf import settings

from cloud import s3

MAX_ARCHIVE_BYTES = 200 * 1024 * 1024
MAX_MEMBERS = 10_000
UNPACKED_FACTOR = 4  # a small archive that unpacks to a full disk is refused too
MAX_NAME = 1024
UPLOAD_SUFFIXES = (".tar.gz", ".tgz", ".zip")
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

    def summary(self) -> dict:
        return {"name": self.name, "bytes": self.size, "sha256": self.sha256, "files": self.files}


def _member_name(raw: str) -> str:
    """``raw`` as a safe relative name (``a/b``), or ArchiveError."""
    if len(raw) > MAX_NAME or "\0" in raw:
        raise ArchiveError(f"{raw[:80]!r}: not a usable file name")
    if "\\" in raw:
        raise ArchiveError(f"{raw!r}: backslashes in a name (a Windows path?) are refused")
    if raw.startswith("/") or re.match(r"^[A-Za-z]:", raw):
        raise ArchiveError(f"{raw!r}: absolute paths are refused; names must be relative to the folder")
    parts = [p for p in PurePosixPath(raw).parts if p != "."]
    if ".." in parts:
        raise ArchiveError(f"{raw!r}: '..' would leave the folder")
    return "/".join(parts)


class _Repack:
    """Collects the checked members into the tarball ``pack`` would make (deterministic, so
    one set of files is one archive)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.members = 0
        self.files = 0
        self.unpacked = 0
        self.seen: set[str] = set()
        self.buf = io.BytesIO()
        self.gz = gzip.GzipFile(fileobj=self.buf, mode="wb", mtime=0)
        self.tar = tarfile.open(fileobj=self.gz, mode="w", format=tarfile.PAX_FORMAT)

    def add(self, raw: str, is_dir: bool, size: int, reader, mtime: float) -> None:
        self.members += 1
        if self.members > MAX_MEMBERS:
            raise ArchiveError(f"more than {MAX_MEMBERS} files and folders")
        name = _member_name(raw)
        if not name or name in self.seen:  # "./" itself, or the same path twice
            return
        if SKIPPED.intersection(name.split("/")):
            return  # as pack(): no .git, caches or virtual environments
        self.seen.add(name)
        info = tarfile.TarInfo(name)
        info.mtime = max(0, int(mtime))
        if is_dir:
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            self.tar.addfile(info)
            return
        self.files += 1
        self.unpacked += size
        if self.unpacked > self.limit * UNPACKED_FACTOR:
            raise ArchiveError(f"unpacks to more than {self.limit * UNPACKED_FACTOR} bytes")
        info.size, info.mode = size, 0o644
        data = reader()
        if data is None or len(data) != size:
            raise ArchiveError(f"{name}: the member is truncated")
        self.tar.addfile(info, io.BytesIO(data))

    def finish(self) -> bytes:
        self.tar.close()
        self.gz.close()
        return self.buf.getvalue()


def _read_tar(data: bytes, out: _Repack) -> None:
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            for info in tar:
                if not (info.isfile() or info.isdir()):
                    kind = "link" if info.issym() or info.islnk() else "device or special file"
                    raise ArchiveError(f"{info.name!r} is a {kind}; only regular files and folders travel")
                extracted = tar.extractfile(info) if info.isfile() else None
                out.add(
                    info.name,
                    info.isdir(),
                    info.size,
                    (lambda f=extracted, n=info.size: f.read(n) if f else None),
                    info.mtime,
                )
    except ArchiveError:
        raise
    except (tarfile.TarError, EOFError, OSError, zlib.error, ValueError, struct.error) as exc:
        # a damaged or hostile header: refused like any other unreadable archive, never a 500
        raise ArchiveError(f"not a readable .tar.gz ({exc})") from exc


def _read_zip(data: bytes, out: _Repack) -> None:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            for info in zf.infolist():
                mode = info.external_attr >> 16  # Unix mode; its type bits are 0 from some zippers
                if stat.S_IFMT(mode) not in (0, stat.S_IFREG, stat.S_IFDIR):
                    kind = "link" if stat.S_ISLNK(mode) else "device or special file"
                    raise ArchiveError(
                        f"{info.filename!r} is a {kind}; only regular files and folders travel"
                    )
                if info.flag_bits & 0x1:
                    raise ArchiveError(f"{info.filename!r} is encrypted")
                when = info.date_time
                out.add(
                    info.filename,
                    info.is_dir(),
                    info.file_size,
                    (lambda i=info: zf.read(i)),
                    _zip_mtime(when),
                )
    except ArchiveError:
        raise
    except (
        zipfile.BadZipFile,
        zipfile.LargeZipFile,
        EOFError,
        OSError,
        NotImplementedError,
        RuntimeError,
        ValueError,
        struct.error,
        zlib.error,
    ) as exc:
        raise ArchiveError(f"not a readable .zip ({exc})") from exc


def _zip_mtime(when: tuple[int, int, int, int, int, int]) -> int:
    return calendar.timegm((*when, 0, 0, 0))


def check_upload(name: str, size: int, stream: IO[bytes]) -> Upload:
    """Read an uploaded workdir archive (``name`` as the client called it, ``size`` its bytes)
    and return it checked and repacked, or ArchiveError saying what is wrong."""
    name = Path(name or "").name
    limit = max_bytes()
    if not name.lower().endswith(UPLOAD_SUFFIXES):
        raise ArchiveError(f"{name or 'the file'}: must be a .tar.gz, .tgz or .zip archive of the folder")
    if size > limit:
        raise ArchiveError(f"{name} is {size} bytes; at most {limit} (JOB_WORKDIR_MAX_MB)")
    data = stream.read(limit + 1)
    if len(data) > limit:
        raise ArchiveError(f"{name} is over {limit} bytes (JOB_WORKDIR_MAX_MB)")
    out = _Repack(limit)
    if name.lower().endswith(".zip"):
        if not data.startswith(b"PK"):
            raise ArchiveError(f"{name} is not a zip archive")
        _read_zip(data, out)
    else:
        if not data.startswith(b"\x1f\x8b"):
            raise ArchiveError(f"{name} is not a gzip-compressed tar archive")
        _read_tar(data, out)
    packed = out.finish()
    if not out.seen:
        raise ArchiveError(f"{name} is empty")
    if len(packed) > limit:
        raise ArchiveError(f"{name} repacks to {len(packed)} bytes; at most {limit} (JOB_WORKDIR_MAX_MB)")
    return Upload(name, len(data), hashlib.sha256(data).hexdigest(), packed, out.files)


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
