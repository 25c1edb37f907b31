"""EC2 comm-profiling clusters: N >= 2 nodes of one type, NCCL across all their GPUs.

What a cluster run is (``EC2Provider.start`` does it, ``EC2Provider.stop`` undoes it):

* one ``cluster`` placement group ``srifty-run-{id}`` (``ProfilingRun.placement_group``);
* one ``run_instances`` of ``nodes`` instances (all or none, one zone), with one EFA interface
  per network card where the type has EFA (``efa_interfaces``), the ClientToken of the run;
* the same user-data on every node (``profiler.userdata.comm_cluster_user_data``): it asks this
  server for its node rank and rank 0's private IP (``profiler.actions.rendezvous``), sets the NCCL / libfabric
  environment of the type (``nccl_env``) and runs the agent's NCCL sweep over
  ``nodes × gpus_per_node`` ranks; global rank 0 posts the curves;
* when the run ends, however it ends, every node is terminated and the placement group deleted
  (retried while terminating instances still hold it: ``tasks.cleanup_run_task``).

Why the server tells the nodes who rank 0 is (as for training jobs): it knows every node's
private IP as soon as ``run_instances`` returns, the nodes need no IAM permissions, no launch
order and identical user-data; moto serves the same IPs, so the whole path is testable.
"""

from __future__ import annotations

import logging

from django.conf import settings

from catalog.models import AcceleratorKind, InstanceType
from profiler.models import ProfilingRun

log = logging.getLogger(__name__)

DEFAULT_MAX_NODES = 16  # settings.PROFILER_MAX_COMM_NODES: what one profiling run may rent
# Types whose GPUs read and write EFA buffers directly (GPUDirect RDMA); the others with EFA
# (p3dn, g4dn, g5, g6...) stage through host memory.
GPUDIRECT_RDMA_FAMILIES = ("p4d", "p4de", "p5", "p5e", "p5en", "p6")
# NCCL's socket transport on AWS: NCCL itself picks 2 threads x 8 sockets per peer when it sees
# the ENA driver (net_socket.cc); set explicitly so the profile does not depend on that
# detection and the run records what it measured with. Training jobs get the same by default.
TCP_NCCL_ENV = {"NCCL_SOCKET_NTHREADS": "2", "NCCL_NSOCKS_PERTHREAD": "8"}


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


def network_of(run: ProfilingRun, itype: InstanceType) -> str:
    """How the ranks of ``run`` reached each other between nodes: efa, tcp or none (one node)."""
    if not run.is_cluster:
        return "none"
    return "efa" if efa_interfaces(itype) else "tcp"


def subnet_for(run: ProfilingRun) -> str | None:
    """Where the cluster goes: the first of ``JOB_SUBNET_IDS`` (the clusters' network, as for
    jobs), else the default subnet of a zone the catalog offers the type in. EFA interfaces
    need a subnet named per interface, and naming one zone keeps the placement group in a
    zone that has the type. ``None``: EC2 chooses."""
    from catalog.models import InstanceOffering
    from cloud import ec2

    configured = list(getattr(settings, "JOB_SUBNET_IDS", []) or [])
    if configured:
        return configured[0]
    subnets = ec2.default_subnets(run.region)
    offered = InstanceOffering.objects.filter(
        instance_type__name=run.instance_type, zone__region__code=run.region
    ).values_list("zone__zone_id", flat=True)
    for zone in sorted(offered):
        if zone in subnets:
            return subnets[zone]
    return subnets[min(subnets)] if subnets else None
