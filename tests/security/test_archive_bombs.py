"""Issue 33 items 5 and 7: workdir archives that stand for far more than their bytes.

Before: a 766 KB zip with one 752 MiB member of zeros was read whole and repacked (web RSS
+1.4 GB); a 4 MB tar.gz whose ``.git/`` member inflates to 4 GiB was accepted after 15 s of CPU
(skipped members were inflated but never counted); a 1.6 MB tar.gz with a 1.5 GiB PAX header was
accepted after 31 s at 2.3 GB (tarfile reads the header whole); a zip listing 500,000 entries was
refused only after all were parsed (1.2 GB). Each probe builds its archive here without the
gigabytes (deflate pieces of a zero MiB repeated, CRCs computed without the bytes), posts it to
the launch preview once in a forked child (``tests.support.probe.in_child``) and asserts a 400
naming the limit within seconds and a peak RSS growth under 200 MB; the checking child
(``launcher.unpack``) runs with an address space of ``CHILD_MB``, so the refusal it gives (not
the memory limit's) shows that it streamed.
"""

from __future__ import annotations

import functools
import io
import random
import struct
import tarfile
import time
import zipfile
import zlib
from collections.abc import Callable

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test.client import encode_multipart
from rest_framework.test import APIClient

from launcher import workdirs
from tests.support.probe import in_child

pytestmark = pytest.mark.django_db

MAX_GROWTH_MB = 200
MAX_SECONDS = 10  # a refusal takes well under a second; a slow shared 2-core host gets room
TIMEOUT_S = 60  # in_child kills the request after this: a finding, not a flake
CHILD_MB = 256  # the checking child's address space in these probes (default 512)
MIB = 1024 * 1024
GIB = 1024 * MIB
TASK = "name: t\nworkdir: ./train\nrun: python train.py\n"
BOUNDARY = "ArchiveProbeBoundary"


# --- building archives without their gigabytes -------------------------------------------------


Affine = list[int]  # a map on 32-bit values, affine over GF(2): its value at 0, then at each bit


def _apply(t: Affine, v: int) -> int:
    out, bit = t[0], 0
    while v:
        if v & 1:
            out ^= t[bit + 1] ^ t[0]
        v, bit = v >> 1, bit + 1
    return out


def _affine(f: Callable[[int], int]) -> Affine:
    return [f(0)] + [f(1 << i) for i in range(32)]


def _compose(outer: Affine, inner: Affine) -> Affine:
    return _affine(lambda v: _apply(outer, _apply(inner, v)))


def crc32_of_zeros(crc: int, n: int) -> int:
    """``zlib.crc32(bytes(n), crc)`` without the ``n`` bytes: that map is affine over GF(2) in
    ``crc``, so it is squared up from the map of one zero byte."""
    step, result = _affine(lambda v: zlib.crc32(b"\0", v)), _affine(lambda v: v)
    while n:
        if n & 1:
            result = _compose(step, result)
        step = _compose(step, step)
        n >>= 1
    return _apply(result, crc)


def _flushed(data: bytes, level: int = 9) -> bytes:
    """``data`` as raw deflate blocks that end byte-aligned with an empty dictionary (full
    flush): such pieces can follow one another in any order and any number of times."""
    c = zlib.compressobj(level, zlib.DEFLATED, -15)
    return c.compress(data) + c.flush(zlib.Z_FULL_FLUSH)


@functools.cache
def _zero_mib() -> bytes:
    return _flushed(bytes(MIB))  # ~1 KB


class Deflated:
    """A deflate stream assembled from pieces, with the CRC and length of what it inflates to."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.crc = 0
        self.size = 0

    def data(self, raw: bytes, level: int = 9) -> Deflated:
        self.parts.append(_flushed(raw, level))
        self.crc, self.size = zlib.crc32(raw, self.crc), self.size + len(raw)
        return self

    def zeros(self, mib: int) -> Deflated:
        self.parts.append(_zero_mib() * mib)
        self.crc, self.size = crc32_of_zeros(self.crc, mib * MIB), self.size + mib * MIB
        return self

    def raw(self) -> bytes:
        return b"".join(self.parts) + zlib.compressobj(9, zlib.DEFLATED, -15).flush()  # final block

    def gzip(self) -> bytes:
        header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
        return header + self.raw() + struct.pack("<LL", self.crc, self.size & 0xFFFFFFFF)


def tar_header(name: str, size: int = 0, kind: bytes = tarfile.REGTYPE) -> bytes:
    info = tarfile.TarInfo(name)
    info.size, info.type, info.mode = size, kind, 0o755 if kind == tarfile.DIRTYPE else 0o644
    return info.tobuf(tarfile.USTAR_FORMAT)


def tar_file(name: str, data: bytes) -> bytes:
    return tar_header(name, len(data)) + data + bytes(-len(data) % 512)


TAR_END = bytes(1024)
TRAIN = b"print('training')\n"


def git_bomb_tar_gz(mib: int = 4096) -> bytes:
    """A tarball whose ``.git/objects/pack/big.pack`` (skipped on upload) is ``mib`` MiB of zeros."""
    d = Deflated().data(
        tar_header(".git", kind=tarfile.DIRTYPE) + tar_header(".git/objects/pack/big.pack", mib * MIB)
    )
    return d.zeros(mib).data(tar_file("train.py", TRAIN) + TAR_END).gzip()


def pax_bomb_tar_gz(header_bytes: int = 1536 * MIB) -> bytes:
    """A tarball whose first member is a PAX extended header of ``header_bytes`` (zeros: no
    records, which tarfile 3.11 accepts), then ``train.py``."""
    d = Deflated().data(tar_header("././@PaxHeader", header_bytes, tarfile.XHDTYPE))
    d.zeros(header_bytes // MIB)
    return d.data(tar_file("train.py", TRAIN) + TAR_END).gzip()


def repeated_tar_gz(copies: int, mib: int) -> bytes:
    """The same ``weights.bin`` (``mib`` MiB of zeros) ``copies`` times: one is kept, all inflate."""
    d = Deflated().data(tar_file("train.py", TRAIN))
    for _ in range(copies):
        d.data(tar_header("weights.bin", mib * MIB)).zeros(mib)
    return d.data(TAR_END).gzip()


LOCAL = struct.Struct("<4s5H3L2H")  # local file header, 30 bytes
CENTRAL = struct.Struct("<4s6H3L5H2L")  # central-directory entry, 46 bytes
EOCD = struct.Struct("<4s4H2LH")
EOCD64 = struct.Struct("<4sQ2H2L4Q")
LOCATOR = struct.Struct("<4sLQL")
DOS_DATE = 0x21  # 1980-01-01


def zip_entry(name: bytes, method: int, crc: int, packed: int, size: int, offset: int) -> bytes:
    return (
        CENTRAL.pack(
            b"PK\x01\x02",
            0x0314,
            20,
            0,
            method,
            0,
            DOS_DATE,
            crc,
            packed,
            size,
            len(name),
            0,
            0,
            0,
            0,
            0o100644 << 16,
            offset,
        )  # fmt: skip
        + name
    )


def zip_end(entries: int, central: bytes, at: int, claimed: int | None = None) -> bytes:
    """The end records for ``central`` written at ``at``; ``claimed`` entries (default: the
    true count) past 65535 need the zip64 record and its locator."""
    claimed = entries if claimed is None else claimed
    if claimed <= 0xFFFF:
        return EOCD.pack(b"PK\x05\x06", 0, 0, claimed, claimed, len(central), at, 0)
    record_at = at + len(central)
    record = EOCD64.pack(b"PK\x06\x06", 44, 45, 45, 0, 0, claimed, claimed, len(central), at)
    locator = LOCATOR.pack(b"PK\x06\x07", 0, record_at, 1)
    return record + locator + EOCD.pack(b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)


def zeros_zip(mib: int = 752) -> bytes:
    """A zip of one deflated member, ``zeros.bin``, of ``mib`` MiB of zeros."""
    d = Deflated().zeros(mib)
    raw, name = d.raw(), b"zeros.bin"
    local = LOCAL.pack(b"PK\x03\x04", 20, 0, 8, 0, DOS_DATE, d.crc, len(raw), d.size, len(name), 0) + name
    central = zip_entry(name, 8, d.crc, len(raw), d.size, 0)
    return local + raw + central + zip_end(1, central, len(local) + len(raw))


def many_entries_zip(entries: int = 500_000, claimed: int | None = None) -> bytes:
    """A zip whose central directory lists ``entries`` stored empty files (all the same local
    header), its end record claiming ``claimed`` of them (default: the truth)."""
    name = b"a"
    local = LOCAL.pack(b"PK\x03\x04", 10, 0, 0, 0, DOS_DATE, 0, 0, 0, len(name), 0) + name
    central = zip_entry(name, 0, 0, 0, 0, 0) * entries
    return local + central + zip_end(entries, central, len(local), claimed)


def small_zip() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in [("train.py", TRAIN), ("conf/base.yaml", b"lr: 0.1\n"), (".git/HEAD", b"ref\n")]:
            zf.writestr(name, data)
        zf.writestr(".git/objects/", b"")
    return buf.getvalue()


def small_tar_gz(*extra: tuple[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        for name, data in [
            ("train.py", TRAIN),
            ("conf/base.yaml", b"lr: 0.1\n"),
            (".git/HEAD", b"ref\n"),
            *extra,
        ]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


# --- the request ------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def child_memory(settings):
    settings.JOB_WORKDIR_CHECK_MEMORY_MB = CHILD_MB


def preview_body(plan, name: str, archive: bytes) -> bytes:
    """The launch dialog's multipart body, encoded before the fork: the probe's growth is then
    the server's alone, not the test client's encoding of a 25 MB upload."""
    fields = {"plan": plan.pk, "rank": 1, "task": TASK, "max_spend_usd": "10", "max_hours": 2}
    fields["workdir_archive"] = SimpleUploadedFile(name, archive, "application/octet-stream")
    return encode_multipart(BOUNDARY, fields)


def post(client: APIClient, body: bytes) -> tuple[int, str]:
    """(status, body text) of one preview POST: what the forked child sends back to the test."""
    resp = client.post(
        "/api/v1/jobs/preview/", body, content_type=f"multipart/form-data; boundary={BOUNDARY}"
    )
    return resp.status_code, resp.content.decode(errors="replace")[:2000]


def refused_within_bounds(client: APIClient, plan, name: str, archive: bytes, *needles: str) -> str:
    """Post ``archive`` in a forked child; its 400 body, after asserting it came within seconds,
    grew under the bound and names every needle."""
    probe = in_child(post, client, preview_body(plan, name, archive), timeout_s=TIMEOUT_S)
    assert not probe.timed_out, f"the request still ran after {TIMEOUT_S} s"
    assert not probe.error, probe.error
    print(f"{name} ({len(archive)} bytes): {probe}")  # the figures of the closing note (-s)
    code, body = probe.result
    assert code == 400 and "workdir_archive" in body, (code, body, probe)
    for needle in needles:
        assert needle in body, body
    assert probe.elapsed_s < MAX_SECONDS, probe
    assert probe.growth_mb < MAX_GROWTH_MB, probe
    return body


# --- the probes ---------------------------------------------------------------------------------


def test_the_zero_run_crc_helper_matches_zlib():
    for start, n in [(0, 0), (0, 1), (12345, 3 * MIB + 7), (zlib.crc32(b"head"), 513)]:
        assert crc32_of_zeros(start, n) == zlib.crc32(bytes(n), start)


def test_a_zip_of_one_752_mib_member_of_zeros_is_refused_from_its_declared_size(launcher_api, plan):
    archive = zeros_zip(752)
    assert len(archive) < 800_000
    refused_within_bounds(launcher_api, plan, "train.zip", archive, "unpacks to more than", "4 x the")


def test_a_tar_gz_whose_skipped_git_member_inflates_to_4_gib_is_refused_at_the_cap(launcher_api, plan):
    archive = git_bomb_tar_gz(4096)
    assert len(archive) < 5 * MIB
    refused_within_bounds(launcher_api, plan, "train.tar.gz", archive, "unpacks to more than")


def test_a_tar_gz_with_a_1_5_gib_pax_header_is_refused_from_its_size_field(launcher_api, plan):
    archive = pax_bomb_tar_gz(1536 * MIB)
    assert len(archive) < 2 * MIB
    refused_within_bounds(
        launcher_api, plan, "train.tar.gz", archive, "PAX extended header of 1610612736 bytes", "at most 8192"
    )


def test_a_zip_listing_500000_entries_is_refused_from_its_end_record(launcher_api, plan):
    refused_within_bounds(
        launcher_api, plan, "train.zip", many_entries_zip(500_000), "more than 10000 files and folders"
    )


def test_a_zip_whose_end_record_understates_500000_entries_is_refused_by_the_walk(launcher_api, plan):
    refused_within_bounds(
        launcher_api,
        plan,
        "train.zip",
        many_entries_zip(500_000, claimed=1),
        "more than 10000 files and folders",
    )


def test_duplicate_members_count_every_time_they_inflate(launcher_api, plan):
    # one 12 MiB member, kept once, sent 4 times: 48 MiB inflated from a ~50 KB upload
    refused_within_bounds(launcher_api, plan, "train.tar.gz", repeated_tar_gz(4, 12), "unpacks to more than")


def test_a_gnu_long_name_over_a_few_kb_is_refused_before_it_is_read():
    d = Deflated().data(tar_header("././@LongLink", 64 * MIB, tarfile.GNUTYPE_LONGNAME)).zeros(64)
    archive = d.data(tar_file("x", b"x") + TAR_END).gzip()
    with pytest.raises(workdirs.ArchiveError, match="GNU long name of 67108864 bytes; at most 8192"):
        workdirs.check_upload("t.tar.gz", len(archive), io.BytesIO(archive))


# --- what still works ------------------------------------------------------------------------------


@pytest.mark.parametrize("name, archive", [("train.tar.gz", small_tar_gz()), ("train.zip", small_zip())])
def test_a_small_archive_with_a_git_folder_is_previewed_without_it(launcher_api, plan, name, archive):
    resp = launcher_api.post(
        "/api/v1/jobs/preview/",
        preview_body(plan, name, archive),
        content_type=f"multipart/form-data; boundary={BOUNDARY}",
    )
    assert resp.status_code == 200, resp.content
    assert resp.json()["workdir_archive"]["files"] == 2
    upload = workdirs.check_upload(name, len(archive), io.BytesIO(archive))
    with tarfile.open(fileobj=io.BytesIO(upload.data), mode="r:gz") as tar:
        assert {m.name: tar.extractfile(m).read() for m in tar if m.isfile()} == {
            "train.py": TRAIN,
            "conf/base.yaml": b"lr: 0.1\n",
        }


def test_long_names_in_pax_and_gnu_headers_still_travel():
    deep = "/".join(["folder"] * 40) + "/train.py"  # 287 characters: past ustar's 255
    pax = small_tar_gz((deep, b"x\n"))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.GNU_FORMAT) as tar:
        info = tarfile.TarInfo(deep)
        info.size = 2
        tar.addfile(info, io.BytesIO(b"x\n"))
    for archive in (pax, buf.getvalue()):
        upload = workdirs.check_upload("t.tar.gz", len(archive), io.BytesIO(archive))
        with tarfile.open(fileobj=io.BytesIO(upload.data), mode="r:gz") as tar:
            assert deep in tar.getnames()


def test_a_large_ordinary_upload_may_inflate_four_times_its_size(settings):
    # 8 MiB of zeros packs to ~8 KB, far more than 4 x, but under the 32 MiB any upload may reach
    archive = Deflated().data(tar_header("zeros.bin", 8 * MIB)).zeros(8).data(TAR_END).gzip()
    assert workdirs.check_upload("t.tar.gz", len(archive), io.BytesIO(archive)).files == 1


def test_past_the_floor_an_upload_may_inflate_to_four_times_its_size_only():
    noise = random.Random(33).randbytes(9 * MIB)  # incompressible: the upload is ~9 MiB
    d = Deflated().data(tar_file("data.bin", noise), level=0)
    archive = d.data(tar_header("zeros.bin", 32 * MIB)).zeros(32).data(TAR_END).gzip()
    assert 4 * len(archive) > workdirs.UNPACKED_FLOOR
    with pytest.raises(workdirs.ArchiveError, match=f"more than {4 * len(archive)} bytes .4 x the"):
        workdirs.check_upload("t.tar.gz", len(archive), io.BytesIO(archive))


def test_the_checking_child_is_killed_at_the_wall_clock_limit(settings, monkeypatch, tmp_path):
    settings.JOB_WORKDIR_CHECK_TIMEOUT_S = 1
    sleeper = tmp_path / "sleeper.py"  # stands in for launcher/unpack.py: a child that never ends
    sleeper.write_text("import time\ntime.sleep(60)\n")
    monkeypatch.setattr(workdirs, "UNPACK_SCRIPT", str(sleeper))
    t0 = time.monotonic()
    with pytest.raises(workdirs.ArchiveError, match=r"more than 1 s \(JOB_WORKDIR_CHECK_TIMEOUT_S\)"):
        workdirs.check_upload("t.tar.gz", 100, io.BytesIO(small_tar_gz()))
    assert time.monotonic() - t0 < 5


def test_a_child_out_of_memory_is_a_400_naming_the_setting(settings):
    settings.JOB_WORKDIR_CHECK_MEMORY_MB = 1
    with pytest.raises(workdirs.ArchiveError, match="JOB_WORKDIR_CHECK_MEMORY_MB"):
        workdirs.check_upload("t.tar.gz", 100, io.BytesIO(small_tar_gz()))
