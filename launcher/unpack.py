"""Check and repack an uploaded workdir archive, streaming, under hard limits (issue 33).

``launcher.workdirs.check_upload`` runs this file as a child process (``python -I unpack.py
JOB``): it imports the standard library only, so the child loads neither Django nor the
project, and before it reads a byte of the upload it caps its own address space, CPU time and
the size of any file it writes (``resource.setrlimit``); the parent adds a wall-clock limit. A
hostile archive can then cost the web process nothing but a wait, and the child at most those
limits. What it checks, in the order that keeps each check cheap:

* every inflated byte is counted where it leaves the decompressor (``Budget``), skipped members
  (``.git``, caches) and duplicate names included, against ``cap`` (the parent's
  min(4 x the upload, 4 x JOB_WORKDIR_MAX_MB), with a floor for tiny uploads);
* tar headers are read 512 bytes at a time from the inflated stream and parsed here
  (``tarfile.TarInfo.frombuf`` for the fixed block); a PAX extended header or a GNU long
  name/link larger than ``MAX_EXTENDED_HEADER`` is refused from its size field, before its data
  is read (``tarfile``'s own reader reads a PAX header's data whole, 1.5 GiB in the probe);
* a zip's member count is read from its end-of-central-directory record (and the zip64 one)
  and the central directory is walked entry by entry (46 bytes each, names skipped) before
  ``zipfile`` parses it, so 500,000 entries are refused without building 500,000 ``ZipInfo``;
  the members' declared sizes are summed against ``cap`` before any is inflated;
* members stream, 64 KiB at a time, from the upload into the repacked gzip tarball on disk,
  whose size is capped as it is written (``limit``).

The output is what ``launcher.workdirs.pack`` makes (a deterministic gzip tarball, PAX format,
no ``.git``, caches or virtual environments); it prints one JSON line: ``{"files", "kept"}``,
``{"refused": why}`` or ``{"limit": "memory"}``.
"""

from __future__ import annotations

import calendar
import errno
import gzip
import json
import re
import resource
import signal
import stat
import struct
import sys
import tarfile
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import IO, Any

MAX_NAME = 1024
MAX_EXTENDED_HEADER = 8 * 1024  # a PAX header or a GNU long name/link: bytes of data
CHUNK = 64 * 1024
BLOCK = 512
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
EXTENDED = {
    tarfile.XHDTYPE: "PAX extended header",
    tarfile.SOLARIS_XHDTYPE: "PAX extended header",
    tarfile.XGLTYPE: "PAX global header",
    tarfile.GNUTYPE_LONGNAME: "GNU long name",
    tarfile.GNUTYPE_LONGLINK: "GNU long link name",
}
PAX_KEPT = {"path", "linkpath", "size", "mtime"}  # the rest (uid, uname, atime, ...) is dropped
PAX_RECORD = re.compile(rb"(\d+) ")
EOCD = struct.Struct("<4s4H2LH")  # end of central directory: 22 bytes
EOCD64 = struct.Struct("<4sQ2H2L4Q")  # zip64 end of central directory: 56 bytes
EOCD64_LOCATOR = struct.Struct("<4sLQL")  # 20 bytes, right before the EOCD
CENTRAL = 46  # fixed part of a central-directory entry


class Refused(ValueError):
    """The archive is refused; the message says why (the parent answers 400 with it)."""


@dataclass(frozen=True)
class Job:
    """What the parent asks: ``kind`` "tar" or "zip", the upload at ``src``, the repacked
    tarball to ``dst``; ``cap`` inflated bytes (``cap_why`` names it), ``limit`` repacked bytes,
    ``max_members``; the child's own limits: ``memory_bytes`` of address space, ``cpu_s``."""

    kind: str
    src: str
    dst: str
    cap: int
    cap_why: str
    limit: int
    max_members: int
    memory_bytes: int
    cpu_s: int


def member_name(raw: str) -> str:
    """``raw`` as a safe relative name (``a/b``), or Refused."""
    if len(raw) > MAX_NAME or "\0" in raw:
        raise Refused(f"{raw[:80]!r}: not a usable file name")
    if "\\" in raw:
        raise Refused(f"{raw!r}: backslashes in a name (a Windows path?) are refused")
    if raw.startswith("/") or re.match(r"^[A-Za-z]:", raw):
        raise Refused(f"{raw!r}: absolute paths are refused; names must be relative to the folder")
    parts = [p for p in PurePosixPath(raw).parts if p != "."]
    if ".." in parts:
        raise Refused(f"{raw!r}: '..' would leave the folder")
    return "/".join(parts)


# --- counting streams ----------------------------------------------------------------------


class Budget:
    """Inflated bytes so far, against the hard cap (one per archive, shared by its members)."""

    def __init__(self, cap: int, why: str) -> None:
        self.cap, self.why, self.used = cap, why, 0

    def take(self, n: int) -> None:
        self.used += n
        if self.used > self.cap:
            raise Refused(f"unpacks to more than {self.cap} bytes ({self.why})")


class Counted:
    """A decompressed stream whose every byte is charged to ``budget`` as it is read."""

    def __init__(self, inner: IO[bytes], budget: Budget) -> None:
        self.inner, self.budget = inner, budget

    def read(self, n: int = CHUNK) -> bytes:
        n = CHUNK if n is None or n < 0 else min(n, CHUNK)  # never one huge read
        data = self.inner.read(n)
        self.budget.take(len(data))
        return data

    def exact(self, n: int) -> bytes:
        """``n`` bytes, or fewer only at the end of the stream."""
        parts: list[bytes] = []
        while n > 0:
            data = self.read(n)
            if not data:
                break
            parts.append(data)
            n -= len(data)
        return b"".join(parts)


class Member:
    """The next ``size`` bytes of a tar stream (one member's data), read in chunks."""

    def __init__(self, src: Counted, size: int) -> None:
        self.src, self.left = src, size

    def read(self, n: int = CHUNK) -> bytes:
        n = self.left if n is None or n < 0 else min(n, self.left)
        data = self.src.exact(n) if n else b""
        self.left -= len(data)
        return data

    def drain(self) -> None:
        """Read (inflate and count) whatever of the member was not copied: skipped members
        cost what they inflate to, like any other."""
        while self.left and self.read(CHUNK):
            pass
        if self.left:
            raise Refused("not a readable .tar.gz (a member is truncated)")


class Capped:
    """The repacked tarball's file: refuses to grow past ``limit`` bytes."""

    def __init__(self, fh: IO[bytes], limit: int) -> None:
        self.fh, self.limit, self.written = fh, limit, 0

    def write(self, data: bytes) -> int:
        self.written += len(data)
        if self.written > self.limit:
            raise Refused(f"repacks to more than {self.limit} bytes (JOB_WORKDIR_MAX_MB)")
        return self.fh.write(data)

    def flush(self) -> None:
        self.fh.flush()


# --- the repacked tarball ------------------------------------------------------------------


class Repack:
    """Collects the checked members into the tarball ``workdirs.pack`` would make
    (deterministic, so one set of files is one archive)."""

    def __init__(self, out: Capped, max_members: int) -> None:
        self.max_members = max_members
        self.members = 0
        self.files = 0
        self.seen: set[str] = set()
        # No name on the file object: the gzip header then carries no file name, as before.
        self.gz = gzip.GzipFile(fileobj=out, mode="wb", mtime=0)
        self.tar = tarfile.open(fileobj=self.gz, mode="w", format=tarfile.PAX_FORMAT)

    def add(self, raw: str, is_dir: bool, size: int, data: Any, mtime: float) -> None:
        """Add one member; ``data`` (a stream with ``read``) is not read for a skipped or
        duplicate one."""
        self.members += 1
        if self.members > self.max_members:
            raise Refused(f"more than {self.max_members} files and folders")
        name = member_name(raw)
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
        info.size, info.mode = size, 0o644
        try:
            self.tar.addfile(info, data)  # copies in chunks; short data raises OSError
        except OSError as exc:
            if exc.errno is None:
                raise Refused(f"{name}: the member is truncated") from exc
            raise

    def finish(self) -> None:
        self.tar.close()
        self.gz.close()


# --- .tar.gz -------------------------------------------------------------------------------


def _special(info: tarfile.TarInfo) -> Refused:
    if info.issym() or info.islnk():
        kind = "link"
    elif info.type == tarfile.GNUTYPE_SPARSE:
        kind = "sparse file"
    else:
        kind = "device or special file"
    return Refused(f"{info.name!r} is a {kind}; only regular files and folders travel")


def _extended_data(src: Counted, info: tarfile.TarInfo) -> bytes:
    """The data of a PAX header or GNU long name, refused from its size field when too big."""
    what = EXTENDED[info.type]
    if info.size > MAX_EXTENDED_HEADER:
        raise Refused(f"a {what} of {info.size} bytes; at most {MAX_EXTENDED_HEADER}")
    padded = -(-info.size // BLOCK) * BLOCK
    data = src.exact(padded)
    if len(data) < padded:
        raise Refused(f"not a readable .tar.gz (a {what} is truncated)")
    return data[: info.size]


def _pax_records(data: bytes) -> dict[str, str]:
    """The records of a PAX header (``"%d %s=%s\\n"``, the length counting the whole record)."""
    out: dict[str, str] = {}
    pos = 0
    while pos < len(data):
        match = PAX_RECORD.match(data, pos)
        if not match:
            if not data[pos:].strip(b"\0"):
                break  # NUL padding after the last record
            raise Refused("not a readable .tar.gz (a bad PAX record)")
        length = int(match.group(1))
        end = pos + length
        if length <= len(match.group(0)) + 1 or end > len(data) or data[end - 1 : end] != b"\n":
            raise Refused("not a readable .tar.gz (a bad PAX record)")
        key, sep, value = data[match.end() : end - 1].partition(b"=")
        if not sep:
            raise Refused("not a readable .tar.gz (a bad PAX record)")
        keyword = key.decode("utf-8", "surrogateescape")
        if keyword.startswith("GNU.sparse."):
            raise Refused("a sparse file (GNU.sparse PAX header); only regular files and folders travel")
        if keyword in PAX_KEPT:
            out[keyword] = value.decode("utf-8", "surrogateescape")
        pos = end
    return out


def _apply(info: tarfile.TarInfo, fields: dict[str, str]) -> None:
    """What the PAX and GNU headers before a member say about it."""
    try:
        if "path" in fields:
            info.name = fields["path"]
        if "linkpath" in fields:
            info.linkname = fields["linkpath"]
        if "size" in fields:
            info.size = int(fields["size"])
        if "mtime" in fields:
            info.mtime = float(fields["mtime"])
    except ValueError as exc:
        raise Refused(f"not a readable .tar.gz (a bad PAX value: {exc})") from exc
    if info.size < 0:
        raise Refused("not a readable .tar.gz (a negative size)")


def _nts(data: bytes) -> str:
    return data.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")


def _tar_member(src: Counted, info: tarfile.TarInfo, out: Repack) -> None:
    if not (info.isfile() or info.isdir()) or info.type == tarfile.GNUTYPE_SPARSE:
        raise _special(info)
    size = info.size if info.isfile() else 0  # as tarfile: a folder has no data blocks
    data = Member(src, size)
    out.add(info.name, info.isdir(), size, data, info.mtime)
    data.drain()
    pad = -size % BLOCK
    if len(src.exact(pad)) < pad:
        raise Refused("not a readable .tar.gz (a member is truncated)")


def read_tar(src: IO[bytes], out: Repack, budget: Budget) -> None:
    """Repack a gzip tarball, header by header; nothing after its end-of-archive block is
    inflated."""
    inflated = Counted(gzip.GzipFile(fileobj=src, mode="rb"), budget)  # type: ignore[arg-type]
    global_fields: dict[str, str] = {}
    fields: dict[str, str] = {}
    try:
        while True:
            block = inflated.exact(BLOCK)
            if not block:
                break  # no end-of-archive block: tarfile accepts that too
            if len(block) < BLOCK:
                raise Refused("not a readable .tar.gz (a truncated header)")
            if block.count(0) == BLOCK:
                break  # end of archive
            info = tarfile.TarInfo.frombuf(block, "utf-8", "surrogateescape")
            if info.type in EXTENDED:
                data = _extended_data(inflated, info)
                if info.type == tarfile.XGLTYPE:
                    global_fields.update(_pax_records(data))
                elif info.type == tarfile.GNUTYPE_LONGNAME:
                    fields["path"] = _nts(data)
                elif info.type == tarfile.GNUTYPE_LONGLINK:
                    fields["linkpath"] = _nts(data)
                else:
                    fields.update(_pax_records(data))
                continue
            _apply(info, {**global_fields, **fields})
            fields = {}
            _tar_member(inflated, info, out)
    except Refused:
        raise
    except (tarfile.TarError, EOFError, zlib.error, ValueError, struct.error) as exc:
        raise Refused(f"not a readable .tar.gz ({exc})") from exc
    except OSError as exc:  # gzip.BadGzipFile, or a truncated stream
        if exc.errno is not None:
            raise
        raise Refused(f"not a readable .tar.gz ({exc})") from exc


# --- .zip ----------------------------------------------------------------------------------


def _read_at(fh: IO[bytes], pos: int, n: int) -> bytes:
    fh.seek(pos)
    return fh.read(n)


def _end_record(fh: IO[bytes], size: int) -> tuple[int, int, int]:
    """(entries, central directory size, where the directory ends) from the
    end-of-central-directory record, found where ``zipfile`` finds it (right at the end, else
    the last signature in the comment-sized tail), and its zip64 version when a locator
    precedes it."""
    if size < EOCD.size:
        raise Refused("not a readable .zip (no end-of-central-directory record)")
    tail = _read_at(fh, size - EOCD.size, EOCD.size)
    if tail[:4] == b"PK\x05\x06" and tail[-2:] == b"\0\0":
        at = size - EOCD.size
    else:
        start = max(0, size - EOCD.size - 0xFFFF)
        tail = _read_at(fh, start, size - start)
        found = tail.rfind(b"PK\x05\x06")
        if found < 0 or len(tail) - found < EOCD.size:
            raise Refused("not a readable .zip (no end-of-central-directory record)")
        at = start + found
    _, _, _, _, entries, cd_size, _, _ = EOCD.unpack(_read_at(fh, at, EOCD.size))
    end = at
    if at >= EOCD64_LOCATOR.size:
        locator = _read_at(fh, at - EOCD64_LOCATOR.size, EOCD64_LOCATOR.size)
        if locator[:4] == b"PK\x06\x07":
            record_at = at - EOCD64_LOCATOR.size - EOCD64.size
            record = _read_at(fh, record_at, EOCD64.size) if record_at >= 0 else b""
            if len(record) < EOCD64.size or record[:4] != b"PK\x06\x06":
                raise Refused("not a readable .zip (a bad zip64 end-of-central-directory record)")
            _, _, _, _, _, _, _, entries, cd_size, _ = EOCD64.unpack(record)
            end = record_at
    return entries, cd_size, end


def count_zip_members(fh: IO[bytes], size: int, max_members: int) -> int:
    """How many entries the central directory holds, refused past ``max_members`` from the
    end record's count, then from a walk of the directory (the count there can lie: ``zipfile``
    parses by the directory's size)."""
    entries, cd_size, end = _end_record(fh, size)
    if entries > max_members:
        raise Refused(f"more than {max_members} files and folders (its directory lists {entries})")
    pos, count = end - cd_size, 0
    if pos < 0:
        raise Refused("not a readable .zip (a bad central directory size)")
    while pos + CENTRAL <= end:
        head = _read_at(fh, pos, CENTRAL)
        if head[:4] != b"PK\x01\x02":
            break  # zipfile refuses the directory itself
        count += 1
        if count > max_members:
            raise Refused(f"more than {max_members} files and folders")
        name_len, extra_len, comment_len = struct.unpack("<3H", head[28:34])
        pos += CENTRAL + name_len + extra_len + comment_len
    return count


def _zip_mtime(when: tuple[int, int, int, int, int, int]) -> int:
    return calendar.timegm((*when, 0, 0, 0))


def read_zip(fh: IO[bytes], size: int, out: Repack, budget: Budget) -> None:
    """Repack a zip: its central directory counted first, its declared sizes summed (every
    member, skipped or not), then each member inflated through the budget."""
    try:
        count_zip_members(fh, size, out.max_members)
        fh.seek(0)
        with zipfile.ZipFile(fh) as zf:
            infos = zf.infolist()
            declared = sum(info.file_size for info in infos)
            if declared > budget.cap:
                raise Refused(f"unpacks to more than {budget.cap} bytes ({budget.why})")
            for info in infos:
                mode = info.external_attr >> 16  # Unix mode; its type bits are 0 from some zippers
                if stat.S_IFMT(mode) not in (0, stat.S_IFREG, stat.S_IFDIR):
                    kind = "link" if stat.S_ISLNK(mode) else "device or special file"
                    raise Refused(f"{info.filename!r} is a {kind}; only regular files and folders travel")
                if info.flag_bits & 0x1:
                    raise Refused(f"{info.filename!r} is encrypted")
                mtime = _zip_mtime(info.date_time)
                if info.is_dir():
                    out.add(info.filename, True, 0, None, mtime)
                    continue
                with zf.open(info) as member:
                    out.add(info.filename, False, info.file_size, Counted(member, budget), mtime)
    except Refused:
        raise
    except (
        zipfile.BadZipFile,
        zipfile.LargeZipFile,
        EOFError,
        NotImplementedError,
        RuntimeError,
        ValueError,
        struct.error,
        zlib.error,
    ) as exc:
        raise Refused(f"not a readable .zip ({exc})") from exc


# --- the child -----------------------------------------------------------------------------


def repack(job: Job) -> dict[str, int]:
    """Check ``job.src`` and write its repacked tarball to ``job.dst``."""
    budget = Budget(job.cap, job.cap_why)
    with open(job.src, "rb") as src, open(job.dst, "wb") as dst:
        out = Repack(Capped(dst, job.limit), job.max_members)
        if job.kind == "zip":
            size = src.seek(0, 2)
            read_zip(src, size, out, budget)
        else:
            read_tar(src, out, budget)
        out.finish()
    return {"files": out.files, "kept": len(out.seen)}


def bound(job: Job) -> None:
    """This process's own hard limits, set before the upload is opened."""
    resource.setrlimit(resource.RLIMIT_AS, (job.memory_bytes, job.memory_bytes))
    resource.setrlimit(resource.RLIMIT_CPU, (job.cpu_s, job.cpu_s + 1))
    # The repacked file cannot outgrow the limit even if a check above were wrong: a write
    # past it fails with EFBIG (SIGXFSZ ignored) instead of filling the disk.
    fsize = job.limit + 1024 * 1024
    resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def run(job: Job) -> dict[str, Any]:
    bound(job)
    try:
        return dict(repack(job))
    except Refused as exc:
        return {"refused": str(exc)}
    except MemoryError:
        return {"limit": "memory"}
    except OSError as exc:
        if exc.errno == errno.EFBIG:
            return {"refused": f"repacks to more than {job.limit} bytes (JOB_WORKDIR_MAX_MB)"}
        raise


def main(argv: list[str]) -> int:
    job = Job(**json.loads(argv[1]))
    result = run(job)
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
