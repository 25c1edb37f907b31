"""The one rendezvous decision (``fleet.rendezvous.decide``), on plain clusters: no database, no
EC2 (the IP lookup and store are handed in)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from fleet.rendezvous import Cluster, decide

IDS = ("i-0", "i-1", "i-2")
IPS = {"i-0": "10.0.0.10", "i-1": "10.0.0.11", "i-2": "10.0.0.12"}


def cluster(**kw) -> Cluster:
    base = {
        "noun": "job",
        "pk": 7,
        "region": "us-east-1",
        "status": "running",
        "ended": False,
        "launching": False,
        "instance_ids": IDS,
        "node_ips": dict(IPS),
    }
    return Cluster(**{**base, **kw})


def keep(found: Mapping[str, str]) -> Mapping[str, str]:
    raise AssertionError("nothing should be looked up")


def no_lookup(region: str, ids: Sequence[str]) -> Mapping[str, str]:
    raise AssertionError("EC2 should not be asked")


def test_it_gives_each_node_its_rank_in_recorded_order_and_rank_0s_address():
    for rank, instance in enumerate(IDS):
        answer = decide(cluster(), instance, keep, no_lookup)
        assert answer.status == 200 and answer.rank == rank
        assert answer.body == {"master_addr": "10.0.0.10", "node_rank": rank, "nnodes": 3}
        assert answer.ips == ("10.0.0.10", "10.0.0.11", "10.0.0.12")


def test_it_stops_a_node_without_an_instance_id_and_every_node_of_an_ended_cluster():
    assert decide(cluster(), "", keep, no_lookup).status == 400
    ended = decide(cluster(ended=True, status="stopped", noun="run", pk=4), "i-0", keep, no_lookup)
    assert (ended.status, ended.body) == (410, {"detail": "run 4 is stopped"})


def test_an_unknown_instance_waits_while_the_cluster_launches_and_is_refused_after():
    assert decide(cluster(launching=True, instance_ids=()), "i-9", keep, no_lookup).status == 202
    assert decide(cluster(launching=True), "i-0", keep, no_lookup).status == 202  # known, not all up yet
    refused = decide(cluster(), "i-9", keep, no_lookup)
    assert (refused.status, refused.body) == (403, {"detail": "this instance is not a node of this job"})


def test_every_node_waits_while_the_recorded_nodes_are_not_the_expected_ones():
    answer = decide(cluster(expected_nodes=2), "i-0", keep, no_lookup)
    assert (answer.status, answer.body) == (202, {"detail": "a replacement is taking its rank; ask again"})
    assert decide(cluster(expected_nodes=3), "i-0", keep, no_lookup).status == 200


def test_missing_ips_are_looked_up_and_stored_before_the_answer():
    stored: list[Mapping[str, str]] = []

    def store(found: Mapping[str, str]) -> Mapping[str, str]:
        stored.append(found)
        return {"i-0": "10.0.0.10", **found}

    def lookup(region: str, ids: Sequence[str]) -> Mapping[str, str]:
        assert (region, tuple(ids)) == ("us-east-1", IDS)
        return {"i-1": "10.0.0.11", "i-2": "10.0.0.12"}

    answer = decide(cluster(node_ips={"i-0": "10.0.0.10"}), "i-2", store, lookup)
    assert answer.status == 200 and answer.rank == 2 and len(stored) == 1


def test_it_waits_for_every_ip_or_only_rank_0s_as_the_cluster_says():
    def store(found: Mapping[str, str]) -> Mapping[str, str]:
        return {"i-0": "10.0.0.10"}

    def lookup(region: str, ids: Sequence[str]) -> Mapping[str, str]:
        return {}

    partial = {"i-0": "10.0.0.10"}
    every = decide(cluster(node_ips=partial), "i-1", store, lookup)
    assert (every.status, every.body) == (202, {"detail": "waiting for the nodes' private IPs"})
    master_only = decide(cluster(node_ips=partial, every_ip=False), "i-1", keep, no_lookup)
    assert master_only.status == 200 and master_only.body["master_addr"] == "10.0.0.10"
    assert master_only.ips == ("10.0.0.10", "", "")
    nothing = decide(cluster(node_ips={}, every_ip=False), "i-1", dict, lookup)  # EC2 shows none yet
    assert nothing.status == 202 and nothing.body == {"detail": "waiting for the master's private IP"}
