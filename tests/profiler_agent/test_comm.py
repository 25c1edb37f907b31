"""Real all_reduce profiles with two gloo ranks on this host, and the comm options."""

from __future__ import annotations

import json

import pytest

from profiler.agent.cli import main
from profiler.agent.comm import CommOptions, bandwidth_gbps
from profiler.agent.schema import validate_profile


def test_comm_profile_with_two_gloo_ranks_validates_and_is_reported(tmp_path, event_server):
    out = tmp_path / "comm.json"
    code = main(
        [
            "comm",
            "--world-size",
            "2",
            "--backend",
            "gloo",
            "--sizes",
            "1KB..64KB",
            "--repeats",
            "3",
            "--warmup",
            "1",
            "--out",
            str(out),
            "--report-to",
            event_server.url,
            "--token",
            "tok",
            "-q",
        ]
    )
    assert code == 0
    with open(out) as handle:
        doc = json.load(handle)
    validate_profile(doc)
    assert (doc["backend"], doc["world_size"], doc["nodes"], doc["ranks_per_node"]) == ("gloo", 2, 1, 2)
    assert [s["size_bytes"] for s in doc["samples"]] == [1024 * 2**i for i in range(7)]
    assert len(doc["hosts"]) == 2
    for sample in doc["samples"]:
        assert len(sample["times_ms"]) == 3 and sample["median_ms"] > 0
        algbw, busbw = bandwidth_gbps(sample["size_bytes"], sample["median_ms"], 2)
        assert sample["algbw_gbps"] == pytest.approx(algbw)
        assert sample["busbw_gbps"] == pytest.approx(sample["algbw_gbps"])  # 2(n-1)/n == 1 for n=2
        assert 0 < sample["cpu_share"] <= 8  # gloo on a CPU: process CPU time over wall time
    events = event_server.events()
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert events[-1]["type"] == "result" and events[-1]["profile"] == doc
    assert sum(e["type"] == "sample" for e in events) == 7
    assert {e["phase"] for e in events if e["type"] == "progress"} == {"comm"}


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has GPUs")
def test_nccl_without_gpus_fails_with_an_error_event(tmp_path, event_server, capsys):
    code = main(
        [
            "comm",
            "--world-size",
            "2",
            "--backend",
            "nccl",
            "--sizes",
            "1KB",
            "--out",
            str(tmp_path / "c.json"),
            "--report-to",
            event_server.url,
            "--token",
            "t",
            "--report-retries",
            "0",
            "-q",
        ]
    )
    assert code == 1
    assert "needs GPU" in capsys.readouterr().err
    [event] = event_server.events()
    assert event["type"] == "error" and "needs GPU" in event["message"] and event["seq"] == 1


def test_bandwidths_follow_the_nccl_tests_all_reduce_convention():
    algbw, busbw = bandwidth_gbps(1_000_000_000, 1000.0, 8)  # 1 GB in 1 s
    assert algbw == pytest.approx(8.0)  # gigabits
    assert busbw == pytest.approx(8.0 * 2 * 7 / 8)
    assert bandwidth_gbps(1024, 1.0, 1)[1] == 0.0


def test_message_ladder_is_geometric_and_whole_float32_elements():
    options = CommOptions(world_size=2, out="x", min_size=1000, max_size=70000, factor=4).resolved()
    assert options.sizes() == [1000, 4000, 16000, 64000, 70000]
    assert all(size % 4 == 0 for size in options.sizes())
    assert CommOptions(world_size=2, out="x").resolved().sizes()[-1] == 64 * 1024**2


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"world_size": 3, "nnodes": 2, "master_addr": "10.0.0.1"}, "not a multiple"),
        ({"world_size": 4, "nnodes": 2}, "needs --master-addr"),
        ({"world_size": 2, "rank": 2}, "--rank must be"),
        ({"world_size": 2, "node_rank": 1}, "--node-rank must be"),
        ({"world_size": 2, "min_size": 4096, "max_size": 1024}, "larger than the largest"),
    ],
)
def test_bad_comm_layouts_are_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        CommOptions(out="x", **kwargs).resolved()


def test_bad_size_range_on_the_command_line_exits_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        main(["comm", "--world-size", "2", "--sizes", "1MB..1KB", "--out", str(tmp_path / "c.json")])
    assert info.value.code == 2
    assert "MIN is larger than MAX" in capsys.readouterr().err
