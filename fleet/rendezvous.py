"""The server side of the nodes' master discovery, for training jobs and comm-profiling runs alike.

Every node of a multi-node cluster, rank 0 included, polls ``GET .../rendezvous/?instance_id=``
with its token (the scripts of ``fleet.boot``) until the server answers 200. :func:`decide` is
that answer, given the cluster as a :class:`Cluster` (what the job or run recorded):

* 400: the node named no instance id;
* 410: the job or run has ended (``ended``);
* 202: the cluster is still launching and this instance is not recorded yet, or the nodes
  recorded are not the nodes expected (a replacement has not taken its rank yet), or a private
  IP the answer needs is not known yet (EC2 is eventually consistent: they are asked again
  through ``lookup`` and kept through ``remember``);
* 403: the cluster has launched and this instance is not one of its nodes;
* 200: ``{"master_addr", "node_rank", "nnodes"}``, where node ranks follow the recorded order of
  ``instance_ids`` (launch order) and the master is rank 0.

Nothing here reads the database: the caller (``launcher.launch.rendezvous``,
``profiler.actions.rendezvous``) describes its record as a :class:`Cluster` and saves what
``remember`` is handed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

# instance id -> private IP, for the instances given (EC2's view; ``cloud.ec2.describe``)
IpLookup = Callable[[str, Sequence[str]], Mapping[str, str]]
# Store the IPs found on the record; returns every node's IP now known.
IpStore = Callable[[Mapping[str, str]], Mapping[str, str]]


@dataclass(frozen=True)
class Cluster:
    """What a rendezvous needs of a job or run: ``noun`` names it in answers ("job", "run")."""

    noun: str
    pk: int
    region: str
    status: str
    ended: bool
    launching: bool  # nodes may still be missing from ``instance_ids``: unknown instances wait
    instance_ids: tuple[str, ...]  # node rank order
    node_ips: Mapping[str, str] = field(default_factory=dict)
    expected_nodes: int | None = None  # nodes the ranks are made for; None: whatever was recorded
    every_ip: bool = True  # the answer needs every node's IP (a job's env), else only rank 0's


@dataclass(frozen=True)
class Answer:
    """An HTTP status and its body; on 200 also the node's rank and every node's IP in rank
    order ("" where unknown, with ``every_ip`` False)."""

    status: int
    body: dict[str, Any]
    rank: int | None = None
    ips: tuple[str, ...] = ()


def describe_ips(region: str, instance_ids: Sequence[str]) -> Mapping[str, str]:
    """EC2's private IPs of the instances, or none when EC2 cannot be asked (the node asks
    again in a few seconds)."""
    from cloud import ec2

    try:
        return {s.id: s.private_ip for s in ec2.describe(region, list(instance_ids)) if s.private_ip}
    except ec2.CloudError:
        log.warning(
            "describing %s nodes in %s for rendezvous failed", len(instance_ids), region, exc_info=True
        )
        return {}


def _refusal(cluster: Cluster, instance_id: str) -> Answer | None:
    """The answers that need no IP: stop (4xx) or wait (202) before the cluster is whole."""
    if not instance_id:
        return Answer(400, {"instance_id": ["required: the asking node's EC2 instance id"]})
    if cluster.ended:
        return Answer(410, {"detail": f"{cluster.noun} {cluster.pk} is {cluster.status}"})
    if instance_id not in cluster.instance_ids and not cluster.launching:
        return Answer(403, {"detail": f"this instance is not a node of this {cluster.noun}"})
    if cluster.launching:
        return Answer(202, {"detail": "the cluster is still launching"})
    if cluster.expected_nodes is not None and len(cluster.instance_ids) != cluster.expected_nodes:
        # A replacement is recorded as soon as it starts and takes its lost node's rank a moment
        # later: until then the ranks do not add up.
        return Answer(202, {"detail": "a replacement is taking its rank; ask again"})
    return None


def decide(cluster: Cluster, instance_id: str, remember: IpStore, lookup: IpLookup = describe_ips) -> Answer:
    """The answer to ``instance_id``'s poll (the list in the module docstring). The IPs the
    answer needs (every node's, or rank 0's) that the record lacks are asked of ``lookup`` and
    handed to ``remember`` before the answer waits for them."""
    refused = _refusal(cluster, instance_id)
    if refused is not None:
        return refused
    ids = cluster.instance_ids
    needed = ids if cluster.every_ip else ids[:1]
    ips: Mapping[str, str] = cluster.node_ips
    if any(not ips.get(i) for i in needed):
        ips = remember(lookup(cluster.region, ids))
    if any(not ips.get(i) for i in needed):
        what = "the nodes' private IPs" if cluster.every_ip else "the master's private IP"
        return Answer(202, {"detail": f"waiting for {what}"})
    rank = ids.index(instance_id)
    body = {"master_addr": ips[ids[0]], "node_rank": rank, "nnodes": len(ids)}
    return Answer(200, body, rank=rank, ips=tuple(ips.get(i) or "" for i in ids))
