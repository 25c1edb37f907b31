"""Property-based tests (hypothesis): whatever an agent or a CSV file sends, the server answers
cleanly and never stores half of anything.

* ``check_profile`` accepts a document or raises ``BadProfile``, nothing else;
* ``complete_run`` and the agent-event endpoint either store the whole profile (every sample, the
  run succeeded) or refuse it (``BadProfile`` / HTTP 400) with nothing stored and the run as it was;
* any agent event gets 200/201/400, never a 5xx, and a stored event is stored once;
* ``parse_instances`` returns rows or raises ``CatalogImportError`` whose messages all start with
  ``line N:``; a failing ``import_catalog`` leaves every catalog table as it was.

Documents are valid profiles (``tests/profiler/fixtures``) with 1-3 mutations: NaN/inf/negative/
huge numbers, wrong types, missing keys, duplicated samples, another schema_version or kind.

Each example runs inside ``transaction.atomic()`` and is rolled back (``set_rollback``), so the
examples of one test do not see each other's rows; on_commit callbacks (websocket fan-out, stop
tasks) never run in these non-transactional tests.

The bugs these properties found (B1-B10: duplicate sample keys, integers past the column range,
non-finite numbers, NUL characters, deep nesting, GpuInfo of the wrong shape, impossible CSV
numbers, all of them 500s or non-CatalogImportError exceptions) were fixed in 00663f4; the
regression tests at the end of this file keep one example of each.
"""

from __future__ import annotations

import copy
import io
import json
import math
import os
import re
from contextlib import contextmanager
from pathlib import Path

import pytest
from django.core.cache import cache
from django.db import connection, transaction
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st
from rest_framework.test import APIClient

from catalog import importer
from catalog.importer import CatalogImportError
from catalog.models import (
    Accelerator,
    AvailabilityZone,
    InstanceOffering,
    InstanceType,
    OnDemandPrice,
    Region,
    SpotPrice,
)
from profiler import actions
from profiler.models import BucketSample, CommSample, ComputeSample, ProfilingRun, RunEvent, RunStatus
from profiler.serializers import MAX_AGENT_SEQ

FIXTURES = Path(__file__).parent.parent / "profiler" / "fixtures"
COMPUTE = json.loads((FIXTURES / "tiny_compute.json").read_text())
COMM = json.loads((FIXTURES / "tiny_comm.json").read_text())

PROPS = settings(
    max_examples=60,
    deadline=None,
    database=None,  # no .hypothesis/ folder in the work tree
    derandomize=bool(os.environ.get("CI")),  # CI replays the same examples; a developer's run explores
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)


@contextmanager
def rolled_back():
    """One example's database work, undone afterwards (a savepoint inside the test's transaction)."""
    with transaction.atomic():
        yield
        transaction.set_rollback(True)


# --- documents and their mutations --------------------------------------------------------


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _paths(doc, prefix=()):
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield (*prefix, key)
            yield from _paths(value, (*prefix, key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            yield (*prefix, i)
            yield from _paths(value, (*prefix, i))


PATHS = {"compute": list(_paths(COMPUTE)), "comm": list(_paths(COMM))}


def _leaf(doc, path):
    for part in path:
        doc = doc[part]
    return doc


NUMERIC_PATHS = {
    kind: [p for p in paths if _number(_leaf(base, p))]
    for (kind, paths), base in zip(PATHS.items(), (COMPUTE, COMM), strict=True)
}

SPECIAL_NUMBERS = [
    float("nan"),
    float("inf"),
    float("-inf"),
    -1,
    -1e-9,
    0,
    0.5,
    2**31,
    2**63,
    2**64,
    10**30,
    1e308,
    1e-320,
]
WEIRD = st.one_of(
    st.sampled_from(SPECIAL_NUMBERS),
    st.integers(),
    st.floats(),
    st.none(),
    st.booleans(),
    st.text(max_size=12),
    st.sampled_from(["", "1", "x" * 300, "\x00", "compute", "comm"]),
    st.lists(st.one_of(st.integers(), st.floats(), st.text(max_size=3)), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)
MUTATION = st.one_of(
    st.tuples(st.just("set"), st.integers(min_value=0), WEIRD),
    st.tuples(
        st.just("set-number"),
        st.integers(min_value=0),
        st.one_of(st.sampled_from(SPECIAL_NUMBERS), st.floats()),
    ),
    st.tuples(st.just("delete"), st.integers(min_value=0)),
    st.tuples(st.just("duplicate-sample"), st.integers(min_value=0)),
    st.tuples(st.just("schema_version"), st.one_of(st.sampled_from([0, 2, "1", 1.0, None, True]), WEIRD)),
    st.tuples(st.just("kind"), st.sampled_from(["comm", "compute", "COMPUTE", "", None, 1])),
)


def _walk(doc, path):
    parent = doc
    for part in path[:-1]:
        parent = parent[part]
    return parent, path[-1]


def mutate(base: dict, mutations) -> dict:
    doc = copy.deepcopy(base)
    paths, numeric = PATHS[base["kind"]], NUMERIC_PATHS[base["kind"]]
    for mutation in mutations:
        op = mutation[0]
        try:
            if op == "set-number":
                parent, key = _walk(doc, numeric[mutation[1] % len(numeric)])
                parent[key] = mutation[2]
            elif op == "set":
                parent, key = _walk(doc, paths[mutation[1] % len(paths)])
                parent[key] = copy.deepcopy(mutation[2])
            elif op == "delete":
                parent, key = _walk(doc, paths[mutation[1] % len(paths)])
                del parent[key]
            elif op == "duplicate-sample":
                samples = doc["samples"]
                samples.append(copy.deepcopy(samples[mutation[1] % len(samples)]))
            elif op == "schema_version":
                doc["schema_version"] = mutation[1]
            elif op == "kind":
                doc["kind"] = mutation[1]
        except (KeyError, IndexError, TypeError, AttributeError, ZeroDivisionError):
            pass  # an earlier mutation removed or replaced this part
    return doc


DOCS = st.builds(mutate, st.sampled_from([COMPUTE, COMM]), st.lists(MUTATION, min_size=1, max_size=3))


# --- what a full store holds -------------------------------------------------------------


def expected_counts(doc: dict) -> tuple[int, int, int]:
    """(compute, bucket, comm) samples a full store of this document has."""
    if doc["kind"] == "compute":
        return 3 * len(doc["samples"]), sum(len(s["buckets"]) for s in doc["samples"]), 0
    return 0, 0, len(doc["samples"])


def stored_counts(run) -> tuple[int, int, int]:
    return (
        ComputeSample.objects.filter(run=run).count(),
        BucketSample.objects.filter(run=run).count(),
        CommSample.objects.filter(run=run).count(),
    )


def _run_kwargs(kind: str) -> dict:
    if kind == "comm":
        return {"kind": "comm", "model_spec": "", "input_shape": "", "world_size": 2, "backend": "gloo"}
    return {"kind": "compute"}


def same_json(a, b) -> bool:
    """Equal as JSON values. PostgreSQL's jsonb keeps numbers as decimals: a float like 5.1e16
    comes back as the int 51000000000000000, off from the float's binary value in the 17th digit."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_json(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b, strict=True))
    if _number(a) and _number(b):
        return a == b or math.isclose(a, b, rel_tol=1e-15)
    return type(a) is type(b) and a == b


def assert_nothing_stored(run, status_before: str) -> None:
    fresh = ProfilingRun.objects.get(pk=run.pk)
    assert fresh.status == status_before, fresh.error
    assert fresh.profile is None
    assert stored_counts(run) == (0, 0, 0)


def assert_fully_stored(run, doc: dict) -> None:
    fresh = ProfilingRun.objects.get(pk=run.pk)
    assert fresh.status == RunStatus.SUCCEEDED
    assert fresh.progress == 1.0 and fresh.profile is not None
    assert same_json(fresh.profile, doc)
    assert stored_counts(run) == expected_counts(doc)


# --- check_profile and complete_run -------------------------------------------------------


def open_bug(doc, exc: BaseException) -> str | None:
    """The still-open bug this exception is (pinned by a strict xfail below), or None."""
    return None  # B16 (a list/dict kind raised TypeError in profiler/agent/schema.py) is fixed


@PROPS
@given(doc=DOCS)
def test_check_profile_accepts_or_raises_bad_profile(doc):
    run = ProfilingRun(kind=doc.get("kind") if doc.get("kind") in ("compute", "comm") else "compute")
    try:
        actions.check_profile(run, doc)
    except actions.BadProfile as exc:
        assert str(exc)
    except TypeError as exc:
        if open_bug(doc, exc) is None:
            raise
        event("open bug B16")
    assert isinstance(actions.BadProfile("x"), ValueError)


@pytest.mark.django_db
@PROPS
@given(doc=DOCS)
def test_complete_run_stores_the_whole_profile_or_nothing(doc, make_run):
    kind = doc.get("kind") if doc.get("kind") in ("compute", "comm") else "compute"
    with rolled_back():
        run = make_run(**_run_kwargs(kind), status=RunStatus.RUNNING)
        try:
            actions.complete_run(run, doc)
        except actions.BadProfile:
            event("refused: BadProfile")
            assert_nothing_stored(run, RunStatus.RUNNING)
            return
        except TypeError as exc:
            if open_bug(doc, exc) is None:
                raise
            event("open bug B16")
            assert_nothing_stored(run, RunStatus.RUNNING)
            return
        event("stored")
        assert_fully_stored(run, doc)


# --- the agent-event endpoint -------------------------------------------------------------


def _wire(doc) -> bytes:
    """JSON as an agent could send it: NaN stays a literal (refused by DRF's strict parser),
    infinities become 1e999, which every JSON parser reads as a float overflowing to inf."""
    text = json.dumps(doc, allow_nan=True)
    return re.sub(r"(?<![\w\"])(-?)Infinity\b", r"\g<1>1e999", text).encode()


def _no_constants(name):
    raise ValueError(name)


def _post(token: str, run_id: int, body: bytes):
    client = APIClient(raise_request_exception=True)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client.post(f"/api/v1/profiling-runs/{run_id}/events/", body, content_type="application/json")


@pytest.mark.django_db
@PROPS
@given(doc=DOCS, seq=st.integers(min_value=1, max_value=10_000_000))
def test_a_posted_result_is_stored_whole_or_refused_with_400(doc, seq, make_run):
    cache.clear()  # the agent throttle counts per run id, and ids repeat after each rollback
    body = _wire({"seq": seq, "type": "result", "profile": doc})
    try:
        seen = json.loads(body, parse_constant=_no_constants)  # what the server parses
    except ValueError:
        seen = None  # NaN: DRF's strict JSON parser refuses the body
    note(f"body: {body[:300]!r}")
    kind = doc.get("kind") if doc.get("kind") in ("compute", "comm") else "compute"
    with rolled_back():
        run = make_run(**_run_kwargs(kind), status=RunStatus.RUNNING)
        token = actions.issue_token(run)
        try:
            resp = _post(token, run.pk, body)  # a view exception (a 500) propagates and fails the example
        except TypeError as exc:
            if open_bug(seen["profile"] if seen else None, exc) is None:
                raise
            event("500, open bug B16")
            assert_nothing_stored(run, RunStatus.RUNNING)
            return
        note(f"{resp.status_code}: {resp.content[:300]!r}")
        event(f"HTTP {resp.status_code}")
        assert resp.status_code in (201, 400)
        if resp.status_code == 201:
            assert seen is not None
            assert_fully_stored(run, seen["profile"])
            assert RunEvent.objects.filter(run=run, seq=seq).count() == 1
        else:
            assert_nothing_stored(run, RunStatus.RUNNING)
            assert not RunEvent.objects.filter(run=run).exists()


JSONISH = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=10)),
    lambda children: st.one_of(
        st.lists(children, max_size=3), st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=8,
)
ENVELOPE_VALUES = {
    "seq": st.one_of(
        st.integers(min_value=-2, max_value=12),
        st.sampled_from([MAX_AGENT_SEQ, MAX_AGENT_SEQ + 1, 2**63, "3", "x", 1.5, 2.0, None, []]),
    ),
    "type": st.one_of(
        st.sampled_from(["progress", "sample", "error", "result", "PROGRESS", "", "log"]), st.text(max_size=5)
    ),
    "phase": st.one_of(st.text(max_size=40), st.integers(), st.none()),
    "fraction": st.one_of(st.floats(allow_nan=False), st.sampled_from([-1, 0, 1, 2, "0.5", None])),
    "time_ms": st.one_of(st.floats(allow_nan=False), st.sampled_from([-1, 0, 3.6e6, 3.6e6 + 1, "1"])),
    "message": st.one_of(st.text(max_size=30), st.integers(), st.none()),
    "batch_size": JSONISH,
    "extra": JSONISH,
}
_OPTIONAL = {k: v for k, v in ENVELOPE_VALUES.items() if k not in ("seq", "type")}
EVENTS = st.one_of(
    # mostly well-formed envelopes, so that the payload and the state changes get exercised
    st.fixed_dictionaries(
        {
            "seq": st.integers(min_value=1, max_value=6),
            "type": st.sampled_from(["progress", "sample", "progress", "error"]),
        },
        optional=_OPTIONAL,
    ),
    st.fixed_dictionaries({}, optional=ENVELOPE_VALUES),
)


@pytest.mark.django_db
@PROPS
@given(events=st.lists(EVENTS, min_size=1, max_size=4))
def test_agent_events_get_a_clean_answer_and_are_stored_once(events, make_run):
    cache.clear()
    with rolled_back():
        run = make_run(status=RunStatus.RUNNING)
        token = actions.issue_token(run)
        for posted in events:
            body = _wire(posted)
            seen = json.loads(body)
            finished = ProfilingRun.objects.get(pk=run.pk).finished
            resp = _post(token, run.pk, body)
            note(f"{body!r} -> {resp.status_code} {resp.content[:200]!r}")
            event(f"HTTP {resp.status_code}")
            # 401 only once an error event ended the run: its token is revoked with it
            assert resp.status_code in ((401, 409) if finished else (200, 201, 400)), resp.content
            if resp.status_code in (200, 201):
                assert RunEvent.objects.filter(run=run, seq=seen["seq"]).count() == 1
                assert resp.json()["duplicate"] is (resp.status_code == 200)
        seqs = list(RunEvent.objects.filter(run=run).values_list("seq", flat=True))
        assert len(seqs) == len(set(seqs))
        fresh = ProfilingRun.objects.get(pk=run.pk)
        assert 0.0 <= fresh.progress <= 1.0
        assert fresh.last_seq == max(seqs, default=0)
        if fresh.finished:
            assert (
                fresh.status == RunStatus.FAILED and RunEvent.objects.filter(run=run, type="error").exists()
            )


# --- the catalog importer -----------------------------------------------------------------

LINE_ERROR = re.compile(r"^line \d+: ")
VALID_ROW = {
    "InstanceType": "p4d.24xlarge",
    "AcceleratorName": "A100",
    "AcceleratorCount": "8",
    "vCPUs": "96",
    "MemoryGiB": "1152",
    "GpuInfo": "{'Gpus': [{'Manufacturer': 'NVIDIA', 'MemoryInfo': {'SizeInMiB': 40960}}], "
    "'TotalGpuMemoryInMiB': 327680}",
    "Price": "32.77",
    "SpotPrice": "9.8",
    "Region": "us-east-1",
    "AvailabilityZone": "use1-az2",
    "Arch": "x86_64",
}
CELL = st.one_of(
    st.text(max_size=12),
    st.sampled_from(
        [
            "",
            " ",
            "nan",
            "inf",
            "-1",
            "0",
            "1e400",
            "1e30",
            "2.5",
            "10001",
            "1" * 5000,
            "0x10",
            "1_000",
            "us-east-1",
            "mars-1",
            "x.large",
            "{}",
            "{'Gpus': 5}",
            "{'Gpus': [5]}",
            "{[1]: 2}",
            "[1, 2]",
            "{'TotalGpuMemoryInMiB': 'a lot'}",
            "{'TotalGpuMemoryInMiB': -5}",
            "(" * 300,
            "'unterminated",
            '"quoted, with comma"',
            "x" * 100,
            "\x00",
            "é",
        ]
    ),
)


@st.composite
def csv_texts(draw) -> str:
    """Either any text at all, or a CSV with the right header and rows mutated from a valid one."""
    if draw(st.booleans()):
        return draw(st.text(max_size=300))
    header = list(importer.INSTANCE_COLUMNS)
    if draw(st.integers(0, 5)) == 0:
        header = draw(st.permutations(header))[: draw(st.integers(0, len(header)))]
    rows = []
    for _ in range(draw(st.integers(0, 4))):
        row = dict(VALID_ROW)
        for column in draw(st.lists(st.sampled_from(importer.INSTANCE_COLUMNS), max_size=3)):
            row[column] = draw(CELL)
        rows.append(row)
    buf = io.StringIO()
    import csv

    writer = csv.DictWriter(buf, fieldnames=header, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    text = buf.getvalue()
    if draw(st.integers(0, 7)) == 0:  # a ragged or broken line somewhere
        text += draw(st.sampled_from(["a,b\n", '"open quote\n', ",,,,,,,,,,,,,,,,\n", "\r\n", '"x"y,1\n']))
    return text


@PROPS
@given(text=csv_texts())
def test_parse_instances_gives_rows_or_line_numbered_errors(text):
    note(repr(text[:500]))
    try:
        rows = importer.parse_instances(io.StringIO(text))
    except CatalogImportError as exc:
        event("CatalogImportError")
        assert exc.errors and all(LINE_ERROR.match(e) for e in exc.errors), exc.errors
        return
    event(f"{len(rows)} rows")
    assert all(isinstance(r, importer.InstanceRow) and r.line >= 2 for r in rows)
    assert all(r.region and r.zone and "." in r.instance_type for r in rows)


CATALOG_MODELS = (
    Accelerator,
    InstanceType,
    Region,
    AvailabilityZone,
    InstanceOffering,
    OnDemandPrice,
    SpotPrice,
)


def _counts() -> dict[str, int]:
    return {m.__name__: m.objects.count() for m in CATALOG_MODELS}


@pytest.mark.django_db
@PROPS
@given(text=csv_texts())
def test_a_failing_import_leaves_the_catalog_as_it_was(text):
    with rolled_back():
        importer.import_catalog(io.StringIO(VALID_ROW_CSV))  # something already there
        before = _counts()
        note(repr(text[:500]))
        try:
            with transaction.atomic():  # a failed import's DB error must not break this example
                importer.import_catalog(io.StringIO(text))
        except CatalogImportError as exc:
            event("CatalogImportError")
            assert all(LINE_ERROR.match(e) for e in exc.errors)
        except Exception:
            assert _counts() == before  # even an unexpected error must leave nothing behind
            raise
        else:
            event("imported")
            return
        assert _counts() == before


def _csv(rows: list[dict]) -> str:
    import csv

    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=importer.INSTANCE_COLUMNS)
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


VALID_ROW_CSV = _csv([VALID_ROW])


# --- regression tests: one example of each bug the properties found (B1-B10, fixed in 00663f4) ---


@pytest.fixture
def running(make_run):
    run = make_run(status=RunStatus.RUNNING)
    return run, actions.issue_token(run)


def _result(profile: dict, seq: int = 1) -> bytes:
    return json.dumps({"seq": seq, "type": "result", "profile": profile}).encode()


@pytest.mark.django_db
def test_b1_a_result_with_a_duplicate_batch_size_is_a_400(running):
    run, token = running
    doc = copy.deepcopy(COMPUTE)
    doc["samples"].append(copy.deepcopy(doc["samples"][0]))
    resp = APIClient(raise_request_exception=False)
    resp.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    r = resp.post(f"/api/v1/profiling-runs/{run.pk}/events/", _result(doc), content_type="application/json")
    assert r.status_code == 400


@pytest.mark.django_db
def test_b2_a_result_with_a_huge_batch_size_is_a_400(running):
    run, token = running
    doc = copy.deepcopy(COMPUTE)
    doc["samples"][0]["batch_size"] = 2**64
    c = APIClient(raise_request_exception=False)
    c.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    assert (
        c.post(
            f"/api/v1/profiling-runs/{run.pk}/events/", _result(doc), content_type="application/json"
        ).status_code
        == 400
    )


@pytest.mark.django_db
def test_b3_a_result_with_an_infinite_cv_is_a_400(running):
    run, token = running
    doc = copy.deepcopy(COMPUTE)
    doc["samples"][0]["phases"]["forward"]["cv"] = float("inf")
    body = _wire({"seq": 1, "type": "result", "profile": doc})  # "cv": 1e999
    c = APIClient(raise_request_exception=False)
    c.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    assert (
        c.post(f"/api/v1/profiling-runs/{run.pk}/events/", body, content_type="application/json").status_code
        == 400
    )


@pytest.mark.django_db
def test_b3_complete_run_refuses_a_nan_cv_with_bad_profile(make_run):
    run = make_run(status=RunStatus.RUNNING)
    doc = copy.deepcopy(COMPUTE)
    doc["samples"][0]["phases"]["forward"]["cv"] = float("nan")  # json.loads of a result file accepts NaN
    with pytest.raises(actions.BadProfile):
        actions.complete_run(run, doc)


@pytest.mark.django_db
def test_b4_a_progress_event_with_an_infinite_extra_field_is_a_400(running):
    run, token = running
    c = APIClient(raise_request_exception=False)
    c.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    body = b'{"seq": 1, "type": "progress", "fraction": 0.5, "loss": 1e999}'
    assert (
        c.post(f"/api/v1/profiling-runs/{run.pk}/events/", body, content_type="application/json").status_code
        == 400
    )


@pytest.mark.django_db
def test_b6_deeply_nested_json_is_a_400(running):
    run, token = running
    c = APIClient(raise_request_exception=False)
    c.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    body = b'{"seq": 1, "type": "sample", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    assert (
        c.post(f"/api/v1/profiling-runs/{run.pk}/events/", body, content_type="application/json").status_code
        == 400
    )


@pytest.mark.django_db
@pytest.mark.skipif(
    connection.vendor != "postgresql", reason="PostgreSQL only (SQLite stores NUL in JSON text)"
)
def test_b7_a_nul_character_in_an_event_is_a_400_on_postgresql(running):
    run, token = running
    c = APIClient(raise_request_exception=False)
    c.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    body = b'{"seq": 1, "type": "sample", "note": "a\\u0000b"}'
    assert (
        c.post(f"/api/v1/profiling-runs/{run.pk}/events/", body, content_type="application/json").status_code
        == 400
    )


def test_b8_an_unhashable_gpu_info_key_is_a_line_error():
    with pytest.raises(CatalogImportError, match="line 2: GpuInfo"):
        importer.parse_instances(io.StringIO(_csv([{**VALID_ROW, "GpuInfo": "{[1]: 2}"}])))


@pytest.mark.django_db
def test_b9_a_gpu_info_of_the_wrong_shape_is_a_line_error():
    with pytest.raises(CatalogImportError, match="line 2:"):
        importer.import_catalog(io.StringIO(_csv([{**VALID_ROW, "GpuInfo": "{'Gpus': 5}"}])))


@pytest.mark.django_db
def test_b10_an_impossible_vcpu_count_is_a_line_error():
    with pytest.raises(CatalogImportError, match="line 2: vCPUs"):
        importer.import_catalog(io.StringIO(_csv([{**VALID_ROW, "vCPUs": "1e30"}])))


@pytest.mark.django_db
def test_b16_a_profile_kind_that_is_a_list_is_a_400(running):
    run, token = running
    doc = copy.deepcopy(COMPUTE)
    doc["kind"] = ["compute"]
    c = APIClient(raise_request_exception=False)
    c.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    r = c.post(f"/api/v1/profiling-runs/{run.pk}/events/", _result(doc), content_type="application/json")
    assert r.status_code == 400
