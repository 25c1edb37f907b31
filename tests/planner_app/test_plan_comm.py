"""Plans time their all-reduces with the NCCL model learned on published curves (issue 19)."""

import pytest

from planner.perf.nccl import LearnedComm, Topology, near_key

pytestmark = pytest.mark.django_db

TINY = {"spec": "torchvision:squeezenet1_1", "input_shape": "3,32,32", "precision": "amp"}


def _oracle_and_candidate(instance_type: str):
    from catalog.models import InstanceType
    from planner.app import service
    from planner.offers import Candidate, family_of
    from planner.oracle import Oracle

    t = InstanceType.objects.get(name=instance_type)
    assert t.accelerator is not None
    wl = service.workload(TINY["spec"], (3, 32, 32), "amp")
    oracle = Oracle(wl, service.transfer_model(), service.gpu_specs(), service.comm_model())
    cand = Candidate(
        t.name,
        family_of(t.name),
        "us-east-1",
        "on-demand",
        None,
        1.0,
        int(t.gpu_count),
        t.accelerator.name,
        t.vcpus,
        t.link_gbps or 0.0,
        t.efa_supported,
    )
    return oracle, cand


@pytest.mark.parametrize(("instance_type", "interconnect"), [("p4d.24xlarge", "efa"), ("g5.2xlarge", "tcp")])
def test_a_two_node_cluster_gets_its_comm_time_from_the_learned_model(catalog, instance_type, interconnect):
    oracle, cand = _oracle_and_candidate(instance_type)
    assert isinstance(oracle.comm, LearnedComm) and oracle.comm.trees.trees  # the shipped, fitted model
    source = oracle.comm_source(((cand, 2),))
    assert source.source == "learned"
    assert interconnect in source.detail
    # the bucket times the simulator overlaps with backward are the model's own estimates
    est = oracle(((cand, 2),), 64 * 2 * cand.gpus_per_node)
    assert est is not None
    cluster = oracle.cluster(((cand, 2),))
    topo = Topology.from_cluster(cluster)
    assert topo.nodes == 2 and topo.net == interconnect
    buckets = oracle.workload.bucket_specs(64)
    times = oracle._comm(cluster, buckets)
    for b, t in zip(buckets, times, strict=True):
        e = oracle.comm.estimate(b.size_bytes, topo)
        assert t.p50_ms == pytest.approx(e.p50_us / 1e3) and t.p90_ms >= t.p50_ms


def test_near_points_count_the_train_sweeps_of_the_same_interconnect_nodes_and_gpus(catalog):
    oracle, cand = _oracle_and_candidate("p4d.24xlarge")
    topo = Topology.from_cluster(oracle.cluster(((cand, 2),)))
    assert oracle.comm_source(((cand, 2),)).near_points == oracle.comm.meta["near"][near_key(topo)] > 0
    # no train sweep has 2 single-GPU nodes over TCP: the row says so with 0
    g5, cand5 = _oracle_and_candidate("g5.2xlarge")
    assert g5.comm_source(((cand5, 2),)).near_points == 0
    assert oracle.comm_source(((cand, 1),)).source == "learned"  # one node of 8 GPUs still all-reduces
    one_gpu, cand1 = _oracle_and_candidate("g5.xlarge")
    assert one_gpu.comm_source(((cand1, 1),)).source == "none"


def test_plan_rows_on_several_nodes_name_the_learned_comm_model(user_api, catalog, run_queued_plans):
    body = {
        "model": TINY,
        "samples_per_epoch": 1_281_167,
        "epochs": 10,
        "objective": "time",
        "budget_usd": 10_000,
        "spot": False,
        "max_nodes": 2,
        "max_types": 1,
        "regions": ["us-east-1"],
        "gpu_models": ["A100"],
        "global_batch_min": 1024,
        "global_batch_max": 1024,
    }
    resp = user_api.post("/api/v1/plans/", body, format="json")
    assert resp.status_code == 202, resp.json()
    run_queued_plans()
    rows = user_api.get(resp["Location"]).json()["result"]["plans"]
    multi = [r for r in rows if sum(g["count"] for g in r["groups"]) == 2]
    assert multi, [r["label"] for r in rows]
    for row in multi:
        assert row["comm_source"] == "learned" and row["comm_near_points"] > 0 and "efa" in row["comm_detail"]


def test_plans_pick_up_a_refit_with_users_curves(catalog, settings):
    import json
    from pathlib import Path

    from planner.app import service
    from planner.perf.nccl import shipped_model

    assert service.comm_model() is shipped_model()  # no refit yet: the repository's model
    refit = shipped_model().to_dict()
    refit["meta"] = {**refit["meta"], "user_points": 7}
    (Path(settings.DATA_DIR) / "nccl-model.json").write_text(json.dumps(refit))
    assert service.comm_model().meta["user_points"] == 7
