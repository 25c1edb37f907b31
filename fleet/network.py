"""The network a cluster's nodes train or measure over, per instance type: EFA interfaces,
NCCL / libfabric settings, node limits. One place for both kinds of cluster Srifty starts:

* **training clusters** (``launcher.launch``): every node gets one EFA interface per network card
  where its type has EFA (``efa_interfaces_of``), and ``network_env`` gives the nodes of each
  type their NCCL environment (``launcher.taskfile.node_env`` puts it into a node's environment);
* **comm-profiling clusters** (``profiler.providers.EC2Provider.start_cluster``): N >= 2 nodes of
  one type in one ``cluster`` placement group ``srifty-run-{id}``, launched all or none in one
  zone (``subnet_for``) with the same EFA interfaces, the same user-data on every node
  (``fleet.boot.comm_cluster_user_data``: it asks the server for its node rank and rank 0's
  private IP, ``fleet.rendezvous``), the type's ``nccl_env`` and the agent's NCCL sweep over
  ``nodes x gpus_per_node`` ranks; global rank 0 posts the curves. When the run ends, however it
  ends, every node is terminated and the placement group deleted (``profiler.tasks``).

Why the server tells the nodes who rank 0 is: it knows every node's private IP as soon as
``run_instances`` returns, the nodes need no IAM permissions, no launch order and identical
user-data; moto serves the same IPs, so the whole path is testable.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from django.conf import settings

from catalog.models import AcceleratorKind, InstanceType

log = logging.getLogger(__name__)

DEFAULT_MAX_NODES = 16  # settings.PROFILER_MAX_COMM_NODES: what one profiling run may rent
# Types whose GPUs read and write EFA buffers directly (GPUDirect RDMA); the others with EFA
# (p3dn, g4dn, g5, g6...) stage through host memory.
GPUDIRECT_RDMA_FAMILIES = ("p4d", "p4de", "p5", "p5e", "p5en", "p6")
# NCCL's socket transport on AWS: NCCL itself picks 2 threads x 8 sockets per peer when it sees
# the ENA driver (net_socket.cc); set explicitly so the profile does not depend on that
# detection and the run records what it measured with. Training jobs get the same by default.
TCP_NCCL_ENV = {"NCCL_SOCKET_NTHREADS": "2", "NCCL_NSOCKS_PERTHREAD": "8"}
# A training node over EFA, on top of ``nccl_env``: bootstrap over the node's real interface, and
# libfabric safe with the forked data-loader workers PyTorch starts.
EFA_NCCL_ENV = {"NCCL_SOCKET_IFNAME": "^lo,docker", "FI_EFA_FORK_SAFE": "1"}


def max_nodes() -> int:
    return int(getattr(settings, "PROFILER_MAX_COMM_NODES", DEFAULT_MAX_NODES))


def gpus_per_node(itype: InstanceType) -> int:
    """Whole NVIDIA GPUs of the type (0 for other accelerators and fractional GPUs)."""
    if itype.accelerator is None or itype.accelerator.kind != AcceleratorKind.NVIDIA_GPU:
        return 0
    return int(itype.gpu_count) if itype.gpu_count >= 1 else 0


def efa_interfaces(itype: InstanceType) -> int:
    """One EFA interface per network card, as far as the type allows EFA interfaces."""
    if not itype.efa_supported:
        return 0
    return max(0, min(itype.network_cards, itype.max_efa_interfaces))


def gpudirect_rdma(instance_type: str) -> bool:
    family = instance_type.split(".")[0]
    return family in GPUDIRECT_RDMA_FAMILIES or family.startswith("p6")


def nccl_env(itype: InstanceType) -> dict[str, str]:
    """The environment NCCL runs with on this type: libfabric's EFA provider (with GPUDirect
    RDMA where the GPUs have it) when the nodes get EFA interfaces, else NCCL's socket transport
    with AWS's thread and socket counts."""
    if efa_interfaces(itype):
        env = {"FI_PROVIDER": "efa"}
        if gpudirect_rdma(itype.name):
            env["FI_EFA_USE_DEVICE_RDMA"] = "1"
        return env
    return dict(TCP_NCCL_ENV)


def _type_row(instance_type: str) -> InstanceType | None:
    return InstanceType.objects.select_related("accelerator").filter(name=instance_type).first()


def efa_interfaces_of(instance_type: str) -> int:
    """EFA interfaces a node of this type gets, as the catalog lists the type (0: no EFA, or a
    type the catalog does not know: the default ENA interface)."""
    row = _type_row(instance_type)
    return efa_interfaces(row) if row is not None else 0


def network_env(instance_types: Iterable[str]) -> dict[str, dict[str, str]]:
    """Per instance type, the NCCL / libfabric environment of a training cluster's nodes: EFA
    types get the EFA provider (``nccl_env``) and ``EFA_NCCL_ENV``, the others NCCL's socket
    thread and socket counts, which get past EC2's per-flow bandwidth limit."""
    out: dict[str, dict[str, str]] = {}
    for name in set(instance_types):
        row = _type_row(name)
        if row is not None and efa_interfaces(row):
            out[name] = {**nccl_env(row), **EFA_NCCL_ENV}
        else:
            out[name] = dict(TCP_NCCL_ENV)
    return out


def network_of(nodes: int, itype: InstanceType) -> str:
    """How the ranks of a cluster of ``nodes`` nodes of ``itype`` reached each other between
    nodes: efa, tcp or none (one node)."""
    if nodes < 2:
        return "none"
    return "efa" if efa_interfaces(itype) else "tcp"


def subnet_for(region: str, instance_type: str) -> str | None:
    """Where a profiling cluster goes: the first of ``JOB_SUBNET_IDS`` (the clusters' network,
    as for jobs), else the default subnet of a zone the catalog offers the type in. EFA
    interfaces need a subnet named per interface, and naming one zone keeps the placement group
    in a zone that has the type. ``None``: EC2 chooses."""
    from catalog.models import InstanceOffering
    from cloud import ec2

    configured = list(getattr(settings, "JOB_SUBNET_IDS", []) or [])
    if configured:
        return str(configured[0])
    subnets = ec2.default_subnets(region)
    offered = InstanceOffering.objects.filter(
        instance_type__name=instance_type, zone__region__code=region
    ).values_list("zone__zone_id", flat=True)
    for zone in sorted(offered):
        if zone in subnets:
            return subnets[zone]
    return subnets[min(subnets)] if subnets else None
