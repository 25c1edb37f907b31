"""An NCCL-shaped all-reduce model for EC2 topologies: a prior fitted on published curves, and a
learned correction of it (p50 and p90).

Topology (:class:`Topology`).  ``n = g·N`` ranks: ``g`` GPUs per node over NVLink/NVSwitch or
PCIe, ``N`` nodes over EFA (``cards × Gbps`` of ``aws_instance_network.csv``) or TCP.

Bandwidths (bytes/s, "bus bandwidth" in the nccl-tests sense)::

    B_intra = ε_nv · NVLink_uni          (per rank; NVLink_uni = datasheet aggregate / 2)
            = ε_pcie · PCIe              (no NVLink: through the host's PCIe switches)
    B_net   = ε_efa · Σ EFA Gbps / 8                   (per node, GPUDirect RDMA: every EFA
                                                        interface attached carries its channels'
                                                        hops; 1 of p4d's 4, all 32 of p5's …)
            = min(ε_efa · Σ EFA Gbps / 8, B_stage)     (EFA without GPUDirect RDMA, below)
            = min(B_wire, B_stage)                     (TCP: NCCL's socket transport, below)

Host staging, the same for TCP and for EFA without GPUDirect RDMA (NCCL's net transport,
src/transport/net.cc: without GDR the GPU kernel writes each step into pinned host memory, the
proxy thread hands it to the NIC or the socket, and the receiver's kernel reads it from host
memory)::

    B_stage = PCIe (one GPU's link, per direction): the sender's GPU → host copy and the
              receiver's host → GPU copy run at either end of the wire in opposite directions of
              their links; one GPU, the one nearest the NIC, carries every channel's network hop
    pipelining: NCCL keeps NCCL_STEPS = 8 steps of a channel in flight, so a message of several
              chunks moves at the slower stage, min(B_wire, B_stage), not the sum of the two;
              only the first chunk crosses both stages in series:
    fill    = m · min(s, C_p) / max(B_wire, B_stage)       (seconds; added to t(a, p))
              m = the algorithm's inter-node steps (ring: min(2N, 2(n−1)); tree and NVLSTree:
              2⌈log2 N⌉), s = the bytes one step moves (ring S/n, tree S), C_p = one step of
              protocol p: Simple NCCL_BUFFSIZE 4 MiB / NCCL_STEPS = 512 KiB, LL 512 KiB of
              16-byte lines / 8 steps, half data = 32 KiB, LL128 4,915,200 B / 8 steps × 120/128 =
              576,000 B (DEFAULT_LL_BUFFSIZE, DEFAULT_LL128_BUFFSIZE, DEFAULT_BUFFSIZE of src/include/device.h,
              devcomm.h before 2.19); B_wire = ε_efa · Σ EFA Gbps / 8 for EFA.  One channel: the fill is an
              upper bound where NCCL splits a step over several

EFA as deployed (ε_efa is the prior's fitted efficiency; every other constant is from AWS's or NCCL's
documentation, none fitted)::

    Σ EFA Gbps  the interfaces a run attaches × their Gbps (a row's stated "EFA 1x100 Gbps", else
                the catalog's peak); the interface count (MaximumEfaInterfaces, or as stated) is
                part of the stated transport and of nothing else: NCCL opens channels on every
                interface, so only their sum moves bytes
    GPUDirect   the NIC reads and writes GPU memory on the p4d/p4de, p5/p5e/p5en and p6 families
                (AWS EFA docs, ``GDR_FAMILIES``); p3dn, g4dn, g5, g6, g6e … have EFA without it
    B_stage     host staging (above), the slower of it and the wire bounds the hop

The socket transport (NCCL over TCP on an ENA interface, no EFA; every constant from NCCL's or
AWS's documentation but ε_tcp and the hop-latency scale s_tcp, fitted like every other transport's
efficiency and latency scale, below)::

    F      = min(64, NCCL_SOCKET_NTHREADS · NCCL_NSOCKS_PERTHREAD) = min(64, 2 · 8) = 16 flows per peer
             (NCCL's AWS defaults, src/transport/net_socket.cc; the product is capped at 64)
           = 1 before NCCL 2.4.8, the release that brought both variables and their AWS defaults
             (NCCL's environment-variable docs: "since 2.4.8"): the proxy thread itself sends and
             receives on one socket per connection.  The AWS defaults are auto-detected from the
             interface's PCI vendor (/sys/class/net/<if>/device/vendor = 0x1d0f, Amazon's ENA);
             an unstated version is a current one (2 · 8)
    f_cap  = 10 Gbit/s per flow inside a cluster placement group, 5 outside (EC2 "instance network
             bandwidth": a single 5-tuple flow)
    B_eni  = (sustained ? BaselineBandwidthGbps : PeakBandwidthGbps) / MaximumNetworkCards
             (one ENA interface sits on one network card; "up to" types burst to the peak for
             minutes on network credits, a training run lasts hours: plans count the baseline,
             nccl-tests curves the peak)
    B_wire = ε_tcp · min(B_eni, F · f_cap) / 8               (ε_tcp: what the socket path delivers
             per wire byte; θ⁰ = TCP/IPv4 payload per wire byte at EC2's 9001-byte MTU:
             (9001 − 52) / (9001 + 38) = 0.990, fitted where train sweeps run over TCP)
    B_tcp  = min(B_wire, B_stage)                            (no GPUDirect over sockets: host
             staging pipelined as for EFA, above; the kernel's socket copies run on NCCL's
             helper threads, F flows over 2 threads, beside the wire and not counted apart)
    h_tcp  = s_tcp · TCP_LAT_US per inter-node step (a kernel TCP hop through NCCL's proxy
             thread; s_tcp fitted, θ⁰ = 1)

No LL128 where the bytes between nodes pass through host memory (TCP, or EFA without GPUDirect
RDMA).  NCCL routes the path between a GPU and a NIC it cannot reach by GPUDirect RDMA through the
CPU (src/graph/paths.cc, ncclTopoComputePaths: "We cannot use GPU Direct RDMA, so we need all NICs
to go through a CPU", a PATH_PHB step; the socket transport reports host pointers only,
NCCL_PTR_HOST), and its tuner enables LL128 only when the graph's GPU-to-NIC path type is at most
PATH_PXB (PATH_PXN on compute capability 9.0 and later; src/graph/tuning.cc, the LL128 default).
So over sockets and host-staged EFA NCCL chooses between LL and Simple, as on PCIe nodes.

Algorithms and protocols, as NCCL's tuner weighs them (``ncclTopoTuneModel``, src/graph/tuning.cc):
for algorithm ``a`` and protocol ``p`` ∈ {LL, LL128, Simple}::

    t(a, p) = base(a, p) + lat(a, p) + S / (algbw(a) · bw_factor(a, p))

    ring      lat = (2(n−1) − m)·h_intra + m·h_net,  m = min(2N, 2(n−1)) inter-node steps (0 if N = 1)
              algbw = min(B_intra, B_net) · n / (2(n−1))
    tree      (N > 1) lat = 2((g−1)·h_intra + ⌈log2 N⌉·h_net)
              algbw = 0.92 · min(B_intra, B_net · N/(2(N−1)))        (what it runs at)
              tuner algbw = 0.92 · ring algbw                        (what NCCL's tuner weighs)
    nvls      (one NVSwitch node of Hopper/Blackwell, g ≥ 4, NVLink SHARP, NCCL ≥ 2.17; Simple)
              lat = h_intra(nvls);  algbw = γ · B_intra · n / (2(n−1))
    nvlstree  (N > 1 of such nodes: NVLS inside, a tree between nodes; Simple only)
              lat = h_intra(nvlstree) + 2⌈log2 N⌉·h_net(nvlstree)
              algbw = min(γ·B_intra·n/(2(n−1)), η·B_net·N/(2(N−1)))
    bw_factor (NCCL's own, ``PROTO_BW``): ring LL 1/4, LL128 0.92, Simple 1;
              tree LL 1/3.8, LL128 120/128, Simple 1 (after the tree's 0.92)

LL128 is on only inside NVLink nodes of Volta, Ampere (A100), Hopper or Blackwell (NCCL
enables it by default only for NVLink paths of compute capability 7.0/8.0/9.0/10.0), and between
such nodes only over GPUDirect RDMA (the socket transport, above); PCIe nodes (T4, A10G, L4)
choose between LL and Simple.

The tree's bandwidth.  NCCL's double binary tree: every node is inside one tree and a leaf of
the other; with reduce and broadcast pipelined, each node's NICs carry ``2S(N−1)/N`` bytes per
direction (``S`` at N = 2, where each node is the other's root in one tree), so between nodes
the tree runs at ``B_net · N/(2(N−1))`` (twice the ring's at 2 nodes, the ring's at many), and
inside a node at the chain's ``B_intra``.  NCCL's own tuner weighs the tree at 0.92 of the ring
instead, so it keeps the ring for large messages even where the tree is faster; the prior
times the tree at the bandwidth the deciding tuner gives it and takes the fastest choice::

    tree algbw = 0.92 · min(B_intra, B_net · N/(2(N−1)))   (the aws-ofi-nccl tuner plugin decides)
               = 0.92 · ring algbw                          (NCCL's own tuner decides)

(Timing NCCL's own choice at the tree's true bandwidth would let a 4-node tree beat the 3-node
ring where the tuner switches; the plan search's early stop rests on the prior never falling
as nodes are added, which both forms keep: each is a minimum of times that grow with N.)

The aws-ofi-nccl tuner plugin (aws-ofi-nccl's platform tuner for p5/p5e/p5en/p6; NCCL's tuner
plugin API since 2.19) decides on Hopper and Blackwell NVSwitch nodes over EFA with NCCL ≥ 2.19
or an unstated version (a current image; plans).  NCCL's version band is also a feature of the
correction below.

``base`` and ``h`` are NCCL's own latency tables (µs; ``NCCL_LATENCY``: NVLink, PCIe and NET
rows of the NCCL version band of the run, read from the published binaries of 2.13, 2.14, 2.18
and 2.27) times one fitted scale per link class; TCP has no row in NCCL's table and
uses ``TCP_LAT_US``.  NCCL adds to each NET hop the latency its net plugin reports
(``ncclNetProperties_t.latency``, the graph's ``latencyInter``; twice for Simple); the prior
does not add the aws-ofi-nccl plugin's figure: its source is not at hand to cite, and it tunes
NCCL's choice rather than timing a message (the p5 2-node train sweep's 8-byte all-reduce
takes 65-88 µs, under what NCCL's tables give with a NET hop of tens of µs more); the fitted
``s_net`` scale carries the fabric's own hop latency instead.  The prior is ``min_{a,p} t(a, p)`` — NCCL picks the fastest predicted
pair per size.  Bandwidths of the hierarchical algorithm count the node's NICs once per node
(``N`` in the factor), which is why 2-node NVLSTree bus bandwidths exceed the NIC rate.

Fitting the prior (:func:`fit_prior`).  ``θ = (ε_nv, ε_pcie, ε_efa, ε_tcp, γ, η, s_nv, s_pcie,
s_net, s_base, s_tcp)`` minimise ``Σ_i w_i (ln t_prior,i − ln t_i)² + λ Σ_k (ln θ_k − ln θ⁰_k)²`` over the
train sweeps (``w_i`` = 1/points of its sweep, so every sweep weighs the same), within physical
bounds (ε ≤ 1).  The ridge keeps parameters that no train sweep informs at their NCCL/datasheet
values (``θ⁰``): the shipped split's train sweeps run nothing over TCP, so its ε_tcp and s_tcp
stay there; a fit that sees TCP sweeps (the benches' leave-one-regime-out folds) moves them as
it moves ε_efa.  (Fitting the socket transport like the others was decided on that symmetry,
2026-12-08, before any figure of it was computed.)

Learned correction (:class:`LearnedComm`).  XGBoost on ``y = ln(t_measured / t_prior)`` with
features log2 size, nodes, GPUs per node, interconnect class, GPU generation, NCCL version band
and ``ln t_prior``; trained on the train sweeps of ``planner/data/nccl_split.json`` only
(:mod:`planner.nccl_corpus`), plus curves users profiled on EC2, exported to plain trees
(:class:`planner.perf.opclass.Trees`).  p50 is the squared-error fit in log space (the number
of trees chosen by cross-validation holding out whole sweeps); p90 is a second forest of the
same size with the pinball loss at 0.9 (``reg:quantileerror``), floored at p50.  A published
curve is one time per size, so p90 spreads across sweeps of similar topologies, not
run-to-run noise of one cluster.  Where no train point shares the topology's interconnect,
node count and GPUs per node, p90 is at least ``p50 · far_p90_ratio``: the 90th percentile of
measured/predicted when each train sweep is predicted by a fit without it
(:func:`held_out_ratios`).

Uncertainty per regime.  ``regime_key`` = (interconnect class, GPUDirect or host-staged for EFA,
node band 1 | 2 | 3-8 | 9-32 | 33+).  With the same held-out logs ``ℓ_i = ln(t_i / p50_i)``
(each train sweep predicted by a fit without it), ``regime_p90_ratio[k] = max(1, exp(ℓ_(⌊0.9m⌋)))``
over the ``m`` logs of regime ``k``; an estimate's p90 is at least ``p50 ·
regime_p90_ratio[regime_key(topo)]`` where its regime has held-out logs, else at least ``p50 ·
far_p90_ratio`` when no train point is near it.  p50 is the correction's; p90 =
``max(p50, p90 trees, p50 · floor)``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from planner.perf.opclass import Trees

PCIE_GB_S = 20.0  # PCIe Gen4 x16 per direction; Gen3 boards (T4) sit at ~half, see ``pcie_gb_s``
PCIE_GEN3 = ("Volta", "Turing")
# NCCL's tuner weighs each protocol's bus bandwidth by these factors (src/graph/tuning.cc,
# ncclTopoTuneModel, "Various model refinements", the same from 2.13 to 2.27): the ring's LL at
# 1/4 for an all-reduce, its LL128 at 0.92 (NVLink nodes, ppn >= 2); the tree's LL at 1/3.8, its
# LL128 at 120/128 between nodes (7/9 on one node, where the prior runs no tree); the tree's Simple
# at 0.92 of the bus bandwidth (``TREE_EFF``, applied to every tree protocol before these).
PROTO_BW = {
    "ring": {"LL": 1.0 / 4.0, "LL128": 0.92, "Simple": 1.0},
    "tree": {"LL": 1.0 / 3.8, "LL128": 120.0 / 128.0, "Simple": 1.0},
    "nvls": {"Simple": 1.0},
    "nvlstree": {"Simple": 1.0},
}
PROTOCOLS = ("LL", "LL128", "Simple")
ALGORITHMS = ("tree", "ring", "nvls", "nvlstree")
LINKS = ("nvlink", "pcie", "efa")


def _table(rows: Sequence[Sequence[float]]) -> dict[str, dict[str, float]]:
    """``{algorithm: {protocol: µs}}`` of rows in NCCL's order (Tree, Ring, NVLS, NVLSTree)."""
    return {a: dict(zip(PROTOCOLS, row, strict=True)) for a, row in zip(ALGORITHMS, rows, strict=True)}


# NCCL's latency tables per version band (µs): ``baseLat[algorithm][protocol]`` and
# ``hwLat[link][algorithm][protocol]`` of src/graph/tuning.cc, read from the static float arrays of
# the published libnccl.so.2 of each band (PyPI wheels nvidia-nccl-cu11 2.13.4, 2.14.3, 2.18.3 and
# nvidia-nccl-cu12 2.27.7; CollNet and PAT rows left out: no EC2 fabric runs them).  A version uses
# the latest band at or before it; one older than 2.13 (the corpus's 2.6-2.12 sweeps; no older
# binary is published there) uses 2.13's, an unstated one (a current image) the latest.  NVLS rows
# exist from 2.17 on (NVLink SHARP came with NCCL 2.17); 2.13/2.14 have none.
#   2.13: Tree Simple is one 256 kB chunk per hop (28 µs on every link) and has no base latency;
#         the NET ring's Simple hop is 28 µs.  2.14: the NET ring's Simple hop is 9.6 µs.
#   2.18: Tree Simple 4 (NVLink) / 6 (PCIe) / 14 (NET) per hop; NVLS and NVLSTree a 23 µs base.
#   2.27: Tree Simple has an 8.4 µs base, PCIe's Tree Simple hop 4 µs; NVLS/NVLSTree no base, a
#         25 µs NVLink hop instead; the NET NVLSTree hop 14 µs (19 in 2.18).
NCCL_LATENCY: dict[float, dict[str, dict[str, dict[str, float]]]] = {
    2.13: {
        "base": _table([(4.4, 4.4, 0.0), (3.6, 10.0, 8.4), (0, 0, 0), (0, 0, 0)]),
        "nvlink": _table([(0.52, 1.25, 28.0), (0.47, 1.9, 3.4), (0, 0, 0), (0, 0, 0)]),
        "pcie": _table([(1.0, 1.9, 28.0), (1.0, 2.5, 5.7), (0, 0, 0), (0, 0, 0)]),
        "efa": _table([(5.0, 8.5, 28.0), (2.7, 4.0, 28.0), (0, 0, 0), (0, 0, 0)]),
    },
    2.14: {
        "base": _table([(4.4, 4.4, 0.0), (3.6, 10.0, 8.4), (0, 0, 0), (0, 0, 0)]),
        "nvlink": _table([(0.52, 1.25, 28.0), (0.47, 1.9, 3.4), (0, 0, 0), (0, 0, 0)]),
        "pcie": _table([(1.0, 1.9, 28.0), (1.0, 2.5, 5.7), (0, 0, 0), (0, 0, 0)]),
        "efa": _table([(5.0, 8.5, 28.0), (2.7, 4.0, 9.6), (0, 0, 0), (0, 0, 0)]),
    },
    2.18: {
        "base": _table([(6.8, 14.0, 0.0), (6.6, 14.0, 8.4), (0, 0, 23.0), (0, 0, 23.0)]),
        "nvlink": _table([(0.6, 1.25, 4.0), (0.6, 1.9, 3.4), (0, 0, 0), (0, 0, 0)]),
        "pcie": _table([(1.0, 1.9, 6.0), (1.0, 2.5, 5.7), (0, 0, 0), (0, 0, 0)]),
        "efa": _table([(5.0, 8.5, 14.0), (2.7, 4.0, 14.0), (0, 0, 18.0), (0, 0, 19.0)]),
    },
    2.27: {
        "base": _table([(6.8, 14.0, 8.4), (6.6, 14.0, 8.4), (0, 0, 0), (0, 0, 0)]),
        "nvlink": _table([(0.6, 1.25, 4.0), (0.6, 1.9, 3.4), (0, 0, 25.0), (0, 0, 25.0)]),
        "pcie": _table([(1.0, 1.9, 4.0), (1.0, 2.5, 5.7), (0, 0, 0), (0, 0, 0)]),
        "efa": _table([(5.0, 8.5, 14.0), (2.7, 4.0, 14.0), (0, 0, 18.0), (0, 0, 14.0)]),
    },
}
NVLS_MIN_NCCL = 2.17


def latency_band(version: str) -> float:
    """The key of ``NCCL_LATENCY`` a version's tables come from (comment above)."""
    band = nccl_band(version)
    if math.isnan(band):
        return max(NCCL_LATENCY)
    older = [k for k in NCCL_LATENCY if k <= band + 1e-9]
    return max(older) if older else min(NCCL_LATENCY)


# NCCL has no TCP row (its NET row is for RDMA NICs); a kernel TCP hop through NCCL's proxy thread
# costs tens of µs.  Scaled by the fitted ``lat_tcp`` (1 where no train sweep runs over TCP).
TCP_LAT_US = {"LL": 30.0, "LL128": 40.0, "Simple": 60.0}
# NCCL's socket transport on AWS (src/transport/net_socket.cc, ncclNetSocketGetNsockNthread, and
# NCCL's environment-variable docs): 2 helper threads × 8 sockets per connection when the
# interface's PCI vendor is Amazon's (0x1d0f, ENA); NCCL refuses more than 64 sockets per
# connection.  Both variables, and the AWS auto-detection, came with NCCL 2.4.8 ("since 2.4.8");
# before it the proxy thread sent and received on one socket per connection.
TCP_SOCKET_NTHREADS = 2
TCP_NSOCKS_PERTHREAD = 8
TCP_MAX_SOCKETS = 64
TCP_SOCKETS = min(TCP_MAX_SOCKETS, TCP_SOCKET_NTHREADS * TCP_NSOCKS_PERTHREAD)
TCP_SOCKETS_BEFORE = 1
TCP_MULTISOCKET_NCCL = (2, 4, 8)
# EC2 "Amazon EC2 instance network bandwidth": one flow (5-tuple) gets up to 10 Gbit/s inside a
# cluster placement group, 5 outside it.
TCP_FLOW_GBPS = {True: 10.0, False: 5.0}
# TCP/IPv4 payload per wire byte at EC2's 9001-byte MTU: 52 header bytes (IPv4 20, TCP 20,
# timestamps 12) inside the frame, 38 around it (Ethernet header 14, FCS 4, preamble 8, gap 12).
TCP_FRAME_EFF = (9001 - 52) / (9001 + 38)
# One step of each protocol's buffer (bytes of data; src/include/device.h): Simple 4 MiB
# NCCL_BUFFSIZE over NCCL_STEPS = 8; LL 8 lines × 512 threads × 8 steps × 16-byte lines = 512 KiB
# over 8 steps, half of each line data; LL128 120 × 640 × 8 × 8 bytes over 8 steps, 120 of each
# 128 bytes data.  The first chunk of a host-staged hop crosses GPU↔host and the wire in series.
NCCL_STEPS = 8
STAGE_CHUNK_BYTES = {
    "Simple": 4 * 2**20 / NCCL_STEPS,
    "LL": 8 * 512 * NCCL_STEPS * 16 / NCCL_STEPS / 2,
    "LL128": 120 * 640 * NCCL_STEPS * 8 / NCCL_STEPS * 120 / 128,
}
# AWS EFA documentation ("Elastic Fabric Adapter for AI/ML and HPC workloads", supported
# instance types; "GPUDirect RDMA" column): the p4d/p4de, p5/p5e/p5en and p6 families read and
# write GPU memory from the NIC.  Every other EFA type (p3dn, g4dn, g5, g6, g6e …) has EFA without
# GPUDirect RDMA: NCCL stages each step through pinned host memory.
GDR_FAMILIES = ("p4d", "p4de", "p5", "p5e", "p5en", "p6-b200", "p6-b300", "p6e-gb200")
# NCCL's tuner weighs the tree at 0.92 of its bus bandwidth (src/graph/tuning.cc: busBw·.92)
TREE_EFF = 0.92
# LL128 is on by default only inside NVLink nodes of compute capability 7.0, 8.0, 9.0 or 10.0
# (src/graph/tuning.cc: typeIntra <= PATH_NVL and the compute-capability switch): V100, A100,
# H100/H200, B200.  PCIe nodes (T4, A10G, L4, L40S) run LL and Simple only, and so does any
# multi-node run staged through host memory (typeInter <= PATH_PXB fails: Topology.protocols).
LL128_GENERATIONS = ("Volta", "Ampere", "Hopper", "Blackwell")
# The aws-ofi-nccl tuner plugin (platform tuner for p5/p5e/p5en/p6; NCCL's tuner-plugin API since
# NCCL 2.19) replaces NCCL's own choice of algorithm with AWS's measured one on Hopper and later
# NVSwitch nodes over EFA.  An unstated version is a current image (DLAMI, the plans' case).
AWS_TUNER_MIN_NCCL = 2.19
AWS_TUNER_GENERATIONS = ("Hopper", "Blackwell")
GENERATIONS = ("Volta", "Turing", "Ampere", "Ada", "Hopper", "Blackwell")
INTERCONNECTS = ("nvlink", "pcie", "efa", "tcp")
FEATURES = ("log2_size", "nodes", "gpus_per_node", "interconnect", "generation", "nccl_band", "log_prior_ms")
NODE_FEATURES = ("nodes", "log_prior_ms")  # the features that move with the node count
P90_RATIO = 1.15  # p90/p50 of the bare prior (no correction fitted)


@dataclass(frozen=True)
class PriorParams:
    """The prior's constants (module docstring): efficiencies ε, NVLS gain γ, NVLSTree share η of
    the hierarchical bound, and scales of NCCL's latency tables.  Defaults are datasheet/NCCL
    values; :func:`fit_prior` fits the ``FITTED`` ones on train sweeps."""

    eps_nvlink: float = 0.8
    eps_pcie: float = 0.5
    eps_efa: float = 0.85
    eps_tcp: float = TCP_FRAME_EFF
    nvls_gain: float = 1.4
    nvlstree_eff: float = 0.8
    lat_nvlink: float = 1.0
    lat_pcie: float = 1.0
    lat_net: float = 1.0
    lat_base: float = 1.0
    lat_tcp: float = 1.0

    FITTED = (
        "eps_nvlink",
        "eps_pcie",
        "eps_efa",
        "eps_tcp",
        "nvls_gain",
        "nvlstree_eff",
        "lat_nvlink",
        "lat_pcie",
        "lat_net",
        "lat_base",
        "lat_tcp",
    )
    # (low, high) of each fitted parameter: an efficiency is at most 1; latency scales within 20×.
    BOUNDS = {
        "eps_nvlink": (0.2, 1.0),
        "eps_pcie": (0.2, 1.0),
        "eps_efa": (0.2, 1.0),
        "eps_tcp": (0.2, 1.0),
        "nvls_gain": (1.0, 2.5),
        "nvlstree_eff": (0.2, 1.0),
        "lat_nvlink": (0.25, 20.0),
        "lat_pcie": (0.25, 20.0),
        "lat_net": (0.25, 20.0),
        "lat_base": (0.25, 20.0),
        "lat_tcp": (0.25, 20.0),
    }

    def to_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any] | None) -> PriorParams:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: float(v) for k, v in (doc or {}).items() if k in names})


DEFAULT_PARAMS = PriorParams()


@dataclass(frozen=True)
class Topology:
    gpus_per_node: int
    nodes: int
    generation: str
    nvlink_gb_s: float = 0.0  # datasheet aggregate per GPU (both directions)
    pcie_gb_s: float = PCIE_GB_S
    net: str = "none"  # "efa", "tcp" or "none" (one node)
    net_gbps: float = 0.0  # EFA: sum over cards; TCP: the instance's peak (over all its cards)
    placement_group: bool = True
    nccl_version: str = ""
    nvls_allowed: bool = True  # NCCL_NVLS_ENABLE=0 or a forced algorithm turns NVLS off
    net_cards: int = 1  # MaximumNetworkCards: one ENA interface (TCP) gets one card's share
    net_baseline_gbps: float = 0.0  # BaselineBandwidthGbps (0: as the peak)
    sustained: bool = False  # count the baseline (hours of training), not the burst peak
    gdr: bool = True  # EFA with GPUDirect RDMA (False: host-staged, GDR_FAMILIES)
    net_interfaces: int = 0  # EFA interfaces attached per node (0: not stated)

    @classmethod
    def from_cluster(cls, cluster: Any, nccl_version: str = "") -> Topology:
        """The topology of a :class:`planner.hardware.Cluster` (what plans ask about): its GPU's
        datasheet NVLink, EFA or TCP between nodes.  A plan is hours of training, so TCP counts
        the sustained baseline (``network_gbps``) over one ENA interface (one network card of
        ``aws_instance_network.csv``), not the burst peak; EFA counts the peak."""
        gpu = cluster.gpu
        generation = gpu.architecture if gpu is not None else ""
        multi = cluster.nodes > 1
        net_gbps = float(cluster.peak_gbps or cluster.network_gbps or 0.0) if multi else 0.0
        return cls(
            cluster.gpus_per_node,
            cluster.nodes,
            generation,
            gpu.nvlink_gb_s if gpu is not None else 0.0,
            pcie_gb_s_of(generation),
            ("efa" if cluster.efa else "tcp") if multi else "none",
            net_gbps,
            bool(cluster.placement_group),
            nccl_version,
            net_cards=network_cards(getattr(cluster, "instance_type", "")),
            net_baseline_gbps=float(cluster.network_gbps or 0.0) if multi else 0.0,
            sustained=True,
            gdr=gpudirect_rdma(getattr(cluster, "instance_type", "")),
            net_interfaces=efa_interfaces(getattr(cluster, "instance_type", "")) if cluster.efa else 0,
        )

    @property
    def ranks(self) -> int:
        return self.gpus_per_node * self.nodes

    @property
    def intra(self) -> str:
        return "nvlink" if self.nvlink_gb_s > 0 else "pcie"

    @property
    def interconnect(self) -> str:
        """The class the ring's slowest hop belongs to (a feature of the correction)."""
        return self.net if self.nodes > 1 else self.intra

    @property
    def transport(self) -> str:
        """How NCCL moves the bytes between nodes (or inside the one node), in words."""
        if self.nodes <= 1:
            return self.intra
        if self.net == "tcp":
            return "sockets over TCP"
        if self.net == "efa":
            count = self.net_interfaces
            how = "GPUDirect RDMA" if self.gdr else "staged through host memory (no GPUDirect RDMA)"
            return f"EFA, {count} interface{'s' if count != 1 else ''}, {how}" if count else f"EFA, {how}"
        return self.net

    @property
    def aws_tuner(self) -> bool:
        """Whether the aws-ofi-nccl tuner plugin picks the algorithm (module docstring)."""
        band = nccl_band(self.nccl_version)
        return (
            self.net == "efa"
            and self.nodes > 1
            and self.nvlink_gb_s > 0
            and self.generation in AWS_TUNER_GENERATIONS
            and (math.isnan(band) or band >= AWS_TUNER_MIN_NCCL)
        )

    def protocols(self) -> tuple[str, ...]:
        """NCCL's protocols enabled by default here: LL128 only inside NVLink nodes of
        ``LL128_GENERATIONS``, and not where the bytes between nodes are staged through host
        memory (the path to the NIC runs through the CPU; module docstring)."""
        ll128 = self.nvlink_gb_s > 0 and self.generation in LL128_GENERATIONS and not self.staged
        return PROTOCOLS if ll128 else tuple(p for p in PROTOCOLS if p != "LL128")

    def efa_stage_bw(self) -> float:
        """``B_stage`` (bytes/s): one GPU's PCIe link per direction, the host-staging bound (EFA
        without GDR and TCP alike)."""
        return self.pcie_gb_s * 1e9

    def tcp_wire_gbps(self) -> float:
        """``min(B_eni, F · f_cap)`` of the module docstring (Gbit/s, before ε_tcp)."""
        sustained = self.sustained and self.net_baseline_gbps > 0
        eni = (self.net_baseline_gbps if sustained else self.net_gbps) / max(1, self.net_cards)
        return min(eni, tcp_sockets(self.nccl_version) * TCP_FLOW_GBPS[self.placement_group])

    def tcp_wire_bw(self, params: PriorParams = DEFAULT_PARAMS) -> float:
        """``B_wire`` of the socket transport (bytes/s)."""
        return params.eps_tcp * self.tcp_wire_gbps() / 8 * 1e9

    def tcp_bw(self, params: PriorParams = DEFAULT_PARAMS) -> float:
        """``B_tcp`` (bytes/s): the wire and the host staging pipelined, the slower bounds it."""
        return min(self.tcp_wire_bw(params), self.efa_stage_bw())

    @property
    def staged(self) -> bool:
        """Whether the bytes between nodes pass through host memory (TCP, or EFA without GDR)."""
        return self.nodes > 1 and (self.net == "tcp" or (self.net == "efa" and not self.gdr))

    def stage_fast_bw(self, params: PriorParams = DEFAULT_PARAMS) -> float:
        """``max(B_wire, B_stage)`` of a host-staged hop (bytes/s): the first chunk's second
        stage (module docstring, "fill"); infinite where nothing is staged."""
        if not self.staged:
            return math.inf
        wire = self.tcp_wire_bw(params) if self.net == "tcp" else params.eps_efa * self.net_gbps / 8 * 1e9
        return max(wire, self.efa_stage_bw())

    def intra_bw(self, params: PriorParams = DEFAULT_PARAMS) -> float:
        """Bytes/s per rank inside a node."""
        if self.gpus_per_node <= 1:
            return math.inf
        if self.nvlink_gb_s > 0:
            return params.eps_nvlink * self.nvlink_gb_s / 2 * 1e9
        return params.eps_pcie * self.pcie_gb_s * 1e9

    def net_bw(self, params: PriorParams = DEFAULT_PARAMS) -> float:
        """Bytes/s of one node's network (all its NICs)."""
        if self.nodes <= 1:
            return math.inf
        if self.net == "efa":
            wire = params.eps_efa * self.net_gbps / 8 * 1e9
            return wire if self.gdr else min(wire, self.efa_stage_bw())
        return self.tcp_bw(params)

    def nvls(self) -> bool:
        """NVLink SHARP: NVSwitch nodes of Hopper or later with at least 4 GPUs, NCCL ≥ 2.17 (or
        unstated)."""
        band = nccl_band(self.nccl_version)
        return (
            self.nvls_allowed
            and self.nvlink_gb_s > 0
            and self.gpus_per_node >= 4
            and self.generation in ("Hopper", "Blackwell")
            and (math.isnan(band) or band >= NVLS_MIN_NCCL)
        )


def network_cards(instance_type: str) -> int:
    """``MaximumNetworkCards`` of an instance type in ``aws_instance_network.csv`` (1 when the
    type, or a mix of types, has no row)."""
    return _network_cards().get(instance_type, 1)


_CARDS: dict[str, int] = {}
_EFA_IFACES: dict[str, int] = {}


def _network_cards() -> dict[str, int]:
    if not _CARDS:
        import csv

        path = Path(__file__).resolve().parents[2] / "catalog/fixtures/aws_instance_network.csv"
        with open(path, newline="") as fh:
            for row in csv.DictReader(fh):
                _CARDS[row["InstanceType"]] = int(row.get("MaximumNetworkCards") or 1)
                _EFA_IFACES[row["InstanceType"]] = int(row.get("MaximumEfaInterfaces") or 0)
    return _CARDS


def gpudirect_rdma(instance_type: str) -> bool:
    """Whether EFA on ``instance_type`` reads and writes GPU memory (``GDR_FAMILIES``); a type not
    named (a mix, or none) counts as GPUDirect, the datacentre case."""
    if not instance_type or "+" in instance_type:  # (a mix is named "a.x+b.y", oracle.cluster)
        return True
    return instance_type.split(".")[0] in GDR_FAMILIES


def efa_interfaces(instance_type: str) -> int:
    """``MaximumEfaInterfaces`` of an instance type in ``aws_instance_network.csv`` (0 unknown)."""
    _network_cards()
    return _EFA_IFACES.get(instance_type, 0)


def pcie_gb_s_of(generation: str) -> float:
    """PCIe per direction of the boards' generation: Gen3 x16 for Volta/Turing, Gen4 after."""
    return PCIE_GB_S / 2 if generation in PCIE_GEN3 else PCIE_GB_S


def nccl_version_tuple(version: str) -> tuple[int, int, int] | None:
    """``(major, minor, patch)`` of an NCCL version string (patch 0 when not given; None when no
    version is stated)."""
    import re

    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", version or "")
    return (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)) if m else None


def tcp_sockets(version: str) -> int:
    """``F``, NCCL's sockets per peer connection on an AWS ENA interface: 2 · 8 from NCCL 2.4.8
    (and for an unstated version, a current image), one before (module docstring)."""
    stated = nccl_version_tuple(version)
    return TCP_SOCKETS_BEFORE if stated is not None and stated < TCP_MULTISOCKET_NCCL else TCP_SOCKETS


def nccl_band(version: str) -> float:
    """``major + minor/100`` of an NCCL version string (NaN when not stated)."""
    import re

    m = re.search(r"(\d+)\.(\d+)", version or "")
    return float(m.group(1)) + float(m.group(2)) / 100 if m else math.nan


def _hop_us(link: str, algo: str, proto: str, params: PriorParams, band: float) -> float:
    """NCCL's per-hop latency of ``link`` (µs, its version band's table) times the link's scale."""
    if link == "tcp":
        return TCP_LAT_US[proto] * params.lat_tcp
    scale = {"nvlink": params.lat_nvlink, "pcie": params.lat_pcie, "efa": params.lat_net}[link]
    return NCCL_LATENCY[band][link][algo][proto] * scale


def _base_us(algo: str, proto: str, params: PriorParams, band: float) -> float:
    return params.lat_base * NCCL_LATENCY[band]["base"][algo][proto]


def _nvls_lat_us(algo: str, log_nodes: Any, params: PriorParams, band: float) -> Any:
    """NVLS (one node) or NVLSTree latency: base + NVLink hop + 2⌈log2 N⌉ NET hops (NCCL's form)."""
    lat = _base_us(algo, "Simple", params, band) + _hop_us("nvlink", algo, "Simple", params, band)
    if algo == "nvls":
        return lat
    return lat + 2 * log_nodes * _hop_us("efa", "nvlstree", "Simple", params, band)


def _algorithms(topo: Topology, params: PriorParams) -> list[tuple[str, str, float, float, int, int]]:
    """``(algorithm, protocol, latency µs, algbw bytes/s, staged steps m, step divisor)`` of every
    choice NCCL has here, algbw with the protocol's factor (``PROTO_BW``); the tree at its own
    bandwidth under the aws-ofi-nccl tuner plugin, else at the bandwidth NCCL's tuner weighs it
    with; ``m`` and the divisor (a step moves S / divisor) give the host-staging fill (module
    docstring)."""
    n, g, nodes = topo.ranks, topo.gpus_per_node, topo.nodes
    band = latency_band(topo.nccl_version)
    intra, net = topo.intra_bw(params), topo.net_bw(params)
    ring_bw = min(intra, net) * n / (2 * (n - 1))
    inter_steps = min(2 * nodes, 2 * (n - 1)) if nodes > 1 else 0
    log_nodes = math.ceil(math.log2(nodes)) if nodes > 1 else 0
    tree_bw = TREE_EFF * min(intra, net * nodes / (2 * (nodes - 1))) if nodes > 1 else 0.0
    if not topo.aws_tuner:
        tree_bw = TREE_EFF * ring_bw
    out = []
    for proto in topo.protocols():
        base = _base_us("ring", proto, params, band)
        lat = (
            (2 * (n - 1) - inter_steps) * _hop_us(topo.intra, "ring", proto, params, band)
            + inter_steps * _hop_us(topo.net, "ring", proto, params, band)
            if nodes > 1
            else 2 * (n - 1) * _hop_us(topo.intra, "ring", proto, params, band)
        )
        out.append(("ring", proto, base + lat, ring_bw * PROTO_BW["ring"][proto], inter_steps, n))
        if nodes > 1:
            lat = 2 * (
                (g - 1) * _hop_us(topo.intra, "tree", proto, params, band)
                + log_nodes * _hop_us(topo.net, "tree", proto, params, band)
            )
            tree_lat = _base_us("tree", proto, params, band) + lat
            out.append(("tree", proto, tree_lat, tree_bw * PROTO_BW["tree"][proto], 2 * log_nodes, 1))
    if topo.nvls():
        nvls_bw = params.nvls_gain * intra * g / (2 * (g - 1))
        if nodes == 1:
            out.append(("nvls", "Simple", _nvls_lat_us("nvls", 0, params, band), nvls_bw, 0, 1))
        else:
            hier = params.nvlstree_eff * net * nodes / (2 * (nodes - 1))
            lat = _nvls_lat_us("nvlstree", log_nodes, params, band)
            out.append(("nvlstree", "Simple", lat, min(nvls_bw, hier), 2 * log_nodes, 1))
    return out


def prior_us(size_bytes: float, topo: Topology, params: PriorParams = DEFAULT_PARAMS) -> tuple[float, str]:
    """``(time µs, "algorithm/protocol")``: the fastest of NCCL's choices (module docstring)."""
    if topo.ranks <= 1:
        return 0.0, "none"
    best = (math.inf, "")
    fast = topo.stage_fast_bw(params)
    for algo, proto, lat, algbw, steps, div in _algorithms(topo, params):
        fill = steps * min(size_bytes / div, STAGE_CHUNK_BYTES[proto]) / fast * 1e6
        t = lat + size_bytes / algbw * 1e6 + fill
        if t < best[0]:
            best = (t, f"{algo}/{proto}")
    return best


def prior_us_nodes(size_bytes: Any, topo: Topology, nodes: Any, params: PriorParams = DEFAULT_PARAMS) -> Any:
    """:func:`prior_us`'s time of ``topo`` on each node count of ``nodes`` (numpy, every count
    at least 2), to the bit: the same operations in the same order, over arrays (only the node
    count and the ranks change between rows).  ``size_bytes`` may be an array of sizes: then
    one row per size (sizes x counts)."""
    import numpy as np

    if np.ndim(size_bytes):
        size_bytes = np.asarray(size_bytes, dtype=float)[:, None]

    nodes = np.asarray(nodes, dtype=np.int64)
    if len(nodes) and int(nodes.min()) < 2:
        raise ValueError("prior_us_nodes: every count must be at least 2 nodes")
    multi = dataclasses.replace(topo, nodes=2)  # the per-node figures of a multi-node topology
    band = latency_band(topo.nccl_version)
    g = topo.gpus_per_node
    n = nodes * g
    intra, net = multi.intra_bw(params), multi.net_bw(params)
    ring_bw = min(intra, net) * n / (2 * (n - 1))
    tree_bw = (
        TREE_EFF * np.minimum(intra, net * nodes / (2 * (nodes - 1)))
        if multi.aws_tuner
        else TREE_EFF * ring_bw
    )
    inter_steps = np.minimum(2 * nodes, 2 * (n - 1))
    # ceil(log2(nodes)), in integers: the index of the first power of two at least nodes
    log_nodes = np.searchsorted(1 << np.arange(63, dtype=np.int64), nodes, side="left")
    best: Any = np.full(np.broadcast_shapes(np.shape(size_bytes), nodes.shape), math.inf)
    fast = multi.stage_fast_bw(params)
    for proto in multi.protocols():
        chunk = STAGE_CHUNK_BYTES[proto]
        base = _base_us("ring", proto, params, band)
        lat = (2 * (n - 1) - inter_steps) * _hop_us(
            multi.intra, "ring", proto, params, band
        ) + inter_steps * _hop_us(multi.net, "ring", proto, params, band)
        fill = inter_steps * np.minimum(size_bytes / n, chunk) / fast * 1e6
        best = np.minimum(best, (base + lat) + size_bytes / (ring_bw * PROTO_BW["ring"][proto]) * 1e6 + fill)
        lat = 2 * (
            (g - 1) * _hop_us(multi.intra, "tree", proto, params, band)
            + log_nodes * _hop_us(multi.net, "tree", proto, params, band)
        )
        tree_lat = _base_us("tree", proto, params, band) + lat
        fill = 2 * log_nodes * np.minimum(size_bytes / 1, chunk) / fast * 1e6
        best = np.minimum(best, tree_lat + size_bytes / (tree_bw * PROTO_BW["tree"][proto]) * 1e6 + fill)
    if multi.nvls():
        nvls_bw = params.nvls_gain * intra * g / (2 * (g - 1))
        hier = params.nvlstree_eff * net * nodes / (2 * (nodes - 1))
        lat = _nvls_lat_us("nvlstree", log_nodes, params, band)
        fill = 2 * log_nodes * np.minimum(size_bytes / 1, STAGE_CHUNK_BYTES["Simple"]) / fast * 1e6
        best = np.minimum(best, lat + size_bytes / np.minimum(nvls_bw, hier) * 1e6 + fill)
    return best


def features(size_bytes: float, topo: Topology, prior: float) -> list[float]:
    return [
        math.log2(max(size_bytes, 1.0)),
        float(topo.nodes),
        float(topo.gpus_per_node),
        float(INTERCONNECTS.index(topo.interconnect)),
        float(GENERATIONS.index(topo.generation)) if topo.generation in GENERATIONS else math.nan,
        nccl_band(topo.nccl_version),
        math.log(max(prior, 1e-3) / 1e3),
    ]


def near_key(topo: Topology) -> str:
    """What "trained near this cluster" means: same interconnect class, nodes and GPUs per node."""
    return f"{topo.interconnect}|{topo.nodes}|{topo.gpus_per_node}"


@dataclass(frozen=True)
class CommEstimate:
    """One all-reduce: p50/p90 µs, the model that gave it, and the train points near its topology."""

    p50_us: float
    p90_us: float
    source: str  # "learned" (prior × correction) or "prior" (no correction fitted)
    near_points: int
    choice: str = ""  # NCCL's algorithm/protocol under the prior
    transport: str = ""  # Topology.transport: "sockets over TCP", "efa", "nvlink", "pcie"


def least_correction(
    model: LearnedComm, size_bytes: float | None = None, topo: Topology | None = None
) -> float:
    """The least ``r50`` :meth:`LearnedComm.estimate` can apply (its p50 is at least the prior
    times ``exp`` of this): the trees' base plus each tree's least leaf, clipped; 0 without trees.
    Given a message size and a topology, the least over every node count and prior of that
    topology (:meth:`Trees.least_where` with the features that do not move with the nodes fixed:
    size, GPUs per node, interconnect, generation, NCCL version band), far tighter."""
    if not model.trees.trees:
        return 0.0
    if size_bytes is None or topo is None:
        return max(-model.clip, min(model.clip, model.trees.least()))
    x = features(size_bytes, topo, 1.0)
    fixed = {i: x[i] for i, name in enumerate(FEATURES) if name not in NODE_FEATURES}
    return max(-model.clip, min(model.clip, model.trees.least_where(fixed)))


@dataclass
class LearnedComm:
    """Prior × ``exp(r(x))``, ``r`` clipped to ±ln 4; no trees = the prior."""

    trees: Trees = field(default_factory=Trees)
    clip: float = math.log(4.0)
    meta: dict[str, Any] = field(default_factory=dict)
    params: PriorParams = DEFAULT_PARAMS
    trees_p90: Trees = field(default_factory=Trees)

    def estimate(self, size_bytes: float, topo: Topology) -> CommEstimate:
        prior, choice = prior_us(size_bytes, topo, self.params)
        near = int(self.meta.get("near", {}).get(near_key(topo), 0))
        far = self.p90_floor(topo, near)
        if not self.trees.trees or prior <= 0:
            return CommEstimate(prior, prior * max(P90_RATIO, far), "prior", near, choice, topo.transport)
        x = features(size_bytes, topo, prior)
        r50 = max(-self.clip, min(self.clip, self.trees(x)))
        r90 = (
            max(-self.clip, min(self.clip, self.trees_p90(x)))
            if self.trees_p90.trees
            else r50 + math.log(P90_RATIO)
        )
        r90 = max(r50, r90, r50 + math.log(far))
        return CommEstimate(
            prior * math.exp(r50), prior * math.exp(r90), "learned", near, choice, topo.transport
        )

    def p90_floor(self, topo: Topology, near: int) -> float:
        """The least p90/p50 of ``topo``: the 90th percentile of measured/predicted over the
        held-out points of its regime (``regime_p90_ratio``, :func:`held_out_logs`: each train
        sweep predicted by a fit without it) where its regime has any; else, far from every train
        sweep (no point of this interconnect, node and GPU count), the same over every regime
        (``far_p90_ratio``): the spread a topology nobody measured has shown, not the trees'
        spread near data; else 1."""
        regimes = self.meta.get("regime_p90_ratio", {})
        key = regime_key(topo)
        if key in regimes:
            return float(regimes[key])
        return float(self.meta.get("far_p90_ratio", 1.0)) if near == 0 else 1.0

    def estimate_nodes(
        self, size_bytes: Any, topo: Topology, nodes: Any, with_p90: bool = True
    ) -> tuple[Any, Any]:
        """``(p50 µs, p90 µs)`` arrays: :meth:`estimate` of ``topo`` on each node count of
        ``nodes`` (numpy, all at least 2), to the bit, for a whole curve in one pass (the plan
        search asks hundreds of counts of each instance type).  ``size_bytes`` may be an array
        of message sizes: then ``(sizes, counts)`` arrays, every bucket of a model at once.
        Without ``with_p90`` the second array is the first (p90 is not computed: the comm
        floors need p50 only)."""
        import numpy as np

        nodes = np.asarray(nodes, dtype=np.int64)
        sizes = np.atleast_1d(np.asarray(size_bytes, dtype=float))
        prior = prior_us_nodes(sizes, topo, nodes, self.params)  # (sizes, counts)
        if not with_p90:
            p50 = self._p50_nodes(sizes, topo, nodes, prior)
            return (p50[0], p50[0]) if np.ndim(size_bytes) == 0 else (p50, p50)
        multi = dataclasses.replace(topo, nodes=2)
        near_of = self.meta.get("near", {})
        # the node counts with train points near (near_key: interconnect|nodes|GPUs per node)
        near_nodes = [
            int(parts[1])
            for key, count in near_of.items()
            for parts in (key.split("|"),)
            if int(count) != 0 and parts[0] == multi.interconnect and parts[2] == str(topo.gpus_per_node)
        ]
        floors = [
            self.p90_floor(dataclasses.replace(topo, nodes=k), 1 if k in near_nodes else 0)
            for k in nodes.tolist()
        ]
        far = np.broadcast_to(np.asarray(floors, dtype=float), prior.shape)
        if not self.trees.trees:
            p50, p90 = prior, prior * np.maximum(P90_RATIO, far)
        else:
            x = self._x_nodes(sizes, topo, nodes, prior)
            flat = prior.reshape(-1)
            r50 = self._r50(x)
            if self.trees_p90.trees:
                r90 = np.maximum(-self.clip, np.minimum(self.clip, self.trees_p90.predict_many(x)))
            else:
                r90 = r50 + math.log(P90_RATIO)
            far_flat = far.reshape(-1)
            r90 = np.maximum(np.maximum(r50, r90), r50 + np.array([math.log(v) for v in far_flat.tolist()]))
            e90 = np.array([math.exp(v) for v in r90.tolist()])
            learned = flat > 0  # prior 0: estimate gives the prior (no correction)
            p50 = self._apply(flat, r50).reshape(prior.shape)
            p90 = np.where(learned, flat * e90, flat * np.maximum(P90_RATIO, far_flat)).reshape(prior.shape)
        if np.ndim(size_bytes) == 0:
            return p50[0], p90[0]
        return p50, p90

    def _p50_nodes(self, sizes: Any, topo: Topology, nodes: Any, prior: Any) -> Any:
        """The p50 of :meth:`estimate_nodes` alone (the same arithmetic, to the bit)."""

        if not self.trees.trees:
            return prior
        r50 = self._r50(self._x_nodes(sizes, topo, nodes, prior))
        return self._apply(prior.reshape(-1), r50).reshape(prior.shape)

    def _r50(self, x: Any) -> Any:
        """The clipped p50 correction of feature rows ``x``."""
        import numpy as np

        return np.maximum(-self.clip, np.minimum(self.clip, self.trees.predict_many(x)))

    @staticmethod
    def _apply(flat: Any, r: Any) -> Any:
        """``prior · exp(r)`` per row, the prior itself where it is 0 (no correction)."""
        import numpy as np

        e = np.array([math.exp(v) for v in r.tolist()])
        return np.where(flat > 0, flat * e, flat)

    @staticmethod
    def _x_nodes(sizes: Any, topo: Topology, nodes: Any, prior: Any) -> Any:
        """The feature rows (sizes x counts) of :meth:`estimate_nodes`, as :func:`features` makes them."""
        import numpy as np

        multi = dataclasses.replace(topo, nodes=2)
        x = np.empty((prior.size, len(FEATURES)))
        x[:, 0] = np.repeat([math.log2(max(v, 1.0)) for v in sizes.tolist()], len(nodes))
        x[:, 1] = np.tile(nodes, len(sizes))
        x[:, 2] = float(topo.gpus_per_node)
        x[:, 3] = float(INTERCONNECTS.index(multi.interconnect))
        x[:, 4] = float(GENERATIONS.index(topo.generation)) if topo.generation in GENERATIONS else math.nan
        x[:, 5] = nccl_band(topo.nccl_version)
        x[:, 6] = [math.log(max(p, 1e-3) / 1e3) for p in prior.reshape(-1).tolist()]
        return x

    def predict_us(self, size_bytes: float, topo: Topology) -> tuple[float, float, str]:
        """``(p50 µs, p90 µs, source)`` with source ``"learned"`` or ``"prior"``."""
        e = self.estimate(size_bytes, topo)
        return e.p50_us, e.p90_us, e.source

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": "srifty-nccl-model",
            "version": 2,
            "features": list(FEATURES),
            "prior": self.params.to_dict(),
            "trees": self.trees.to_dict(),
            "trees_p90": self.trees_p90.to_dict(),
            "clip": self.clip,
            "meta": self.meta,
        }

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> LearnedComm:
        if doc.get("format") != "srifty-nccl-model" or list(doc.get("features", ())) != list(FEATURES):
            raise ValueError("nccl model: not a srifty-nccl-model with these features; refit it")
        return cls(
            Trees.from_dict(doc["trees"]),
            float(doc.get("clip", math.log(4.0))),
            dict(doc.get("meta", {})),
            PriorParams.from_dict(doc.get("prior")),
            Trees.from_dict(doc.get("trees_p90") or {}),
        )


XGB_PARAMS = {
    "max_depth": 3,
    "eta": 0.1,
    "min_child_weight": 2.0,
    "lambda": 2.0,
    "objective": "reg:squarederror",
    "seed": 0,
    # 177 points: one thread is 6x faster than a pool fighting over 2 busy cores (same trees)
    "nthread": 1,
}
RIDGE = 0.05


def _sweep_weights(groups: Sequence[str]) -> list[float]:
    counts: dict[str, int] = {}
    for g in groups:
        counts[g] = counts.get(g, 0) + 1
    return [1.0 / counts[g] for g in groups]


def fit_prior(
    points: Sequence[tuple[float, Topology, float, str]],
    start: PriorParams = DEFAULT_PARAMS,
    ridge: float = RIDGE,
) -> PriorParams:
    """The prior's ``FITTED`` parameters by weighted least squares in log time (module docstring)."""
    import numpy as np
    from scipy.optimize import least_squares

    names = PriorParams.FITTED
    x0 = np.log([getattr(start, k) for k in names])
    lo = np.log([PriorParams.BOUNDS[k][0] for k in names])
    hi = np.log([PriorParams.BOUNDS[k][1] for k in names])
    w = np.sqrt(_sweep_weights([p[3] for p in points]))

    def params_of(z: Any) -> PriorParams:
        return dataclasses.replace(start, **{k: float(math.exp(v)) for k, v in zip(names, z, strict=True)})

    def residuals(z: Any) -> Any:
        params = params_of(z)
        r = [math.log(prior_us(size, topo, params)[0] / t) for size, topo, t, _ in points]
        return np.concatenate([w * np.asarray(r), math.sqrt(ridge) * (z - x0)])

    sol = least_squares(residuals, np.clip(x0, lo, hi), bounds=(lo, hi), loss="soft_l1", f_scale=0.3)
    return params_of(sol.x)


def node_band(nodes: int) -> str:
    """``1 | 2 | 3-8 | 9-32 | 33+`` nodes (the node-count bands of issue 35's regimes)."""
    return (
        "1"
        if nodes <= 1
        else "2"
        if nodes == 2
        else "3-8"
        if nodes <= 8
        else "9-32"
        if nodes <= 32
        else "33+"
    )


def regime_key(topo: Topology) -> str:
    """The regime a topology's p90 comes from: interconnect class, GPUDirect or host-staged (EFA),
    node band (module docstring, "Uncertainty")."""
    staging = ("gdr" if topo.gdr else "host") if topo.interconnect == "efa" else "-"
    return f"{topo.interconnect}|{staging}|{node_band(topo.nodes)}"


def held_out_logs(
    points: Sequence[tuple[float, Topology, float, str]], rounds: int = 150
) -> list[tuple[str, float]]:
    """``(regime_key, ln(measured / predicted p50))`` of every point, each sweep predicted by prior
    and correction fitted on the other sweeps (leave one sweep out); each sweep's points are
    repeated ``round(60 / points)`` times, so that every sweep weighs about the same."""
    sweeps = sorted({p[3] for p in points})
    out: list[tuple[str, float]] = []
    for s in sweeps:
        rest = [p for p in points if p[3] != s]
        mine = [p for p in points if p[3] == s]
        model = fit(rest, rounds, held_out=False)
        logs = [
            (regime_key(topo), math.log(t / model.estimate(size, topo).p50_us)) for size, topo, t, _ in mine
        ]
        reps = max(1, round(60 / len(logs)))
        out += logs * reps
    return out


def held_out_ratios(points: Sequence[tuple[float, Topology, float, str]], rounds: int = 150) -> list[float]:
    """The logs of :func:`held_out_logs`, every regime together."""
    return [v for _, v in held_out_logs(points, rounds)]


def p90_ratio(logs: Sequence[float]) -> float:
    """``exp`` of the 90th percentile (nearest rank, ``⌊0.9·m⌋``-th of the sorted logs), at least 1."""
    ordered = sorted(logs)
    return max(1.0, math.exp(ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]))


def fit(
    points: Sequence[tuple[float, Topology, float, str]],
    rounds: int = 150,
    params: PriorParams | None = None,
    held_out: bool = True,
) -> LearnedComm:
    """``points``: ``(size bytes, topology, measured µs, sweep id)`` of train sweeps only.

    The prior is fitted first (:func:`fit_prior`, unless ``params`` are given), then the
    correction; its number of trees is chosen by cross-validation holding out whole sweeps.
    With ``held_out`` (and at least 3 sweeps), ``meta["far_p90_ratio"]`` is the 90th
    percentile of measured/predicted over :func:`held_out_ratios` (at least 1): the p90 floor
    of topologies no train sweep is near (:meth:`LearnedComm.estimate`)."""
    import numpy as np
    import xgboost as xgb

    points = [p for p in points if p[2] > 0 and p[1].ranks > 1]
    params = params or (fit_prior(points) if points else DEFAULT_PARAMS)
    x: list[list[float]] = []
    y: list[float] = []
    groups: list[str] = []
    near: dict[str, int] = {}
    for size, topo, t, sweep in points:
        prior, _ = prior_us(size, topo, params)
        x.append(features(size, topo, prior))
        y.append(math.log(t / prior))
        groups.append(sweep)
        near[near_key(topo)] = near.get(near_key(topo), 0) + 1
    meta: dict[str, Any] = {"points": len(x), "sweeps": sorted(set(groups)), "near": near}
    if held_out and len(set(groups)) >= 3:
        keyed = held_out_logs(points, rounds)
        meta["far_p90_ratio"] = p90_ratio([v for _, v in keyed])
        by_regime: dict[str, list[float]] = {}
        for key, v in keyed:
            by_regime.setdefault(key, []).append(v)
        meta["regime_p90_ratio"] = {k: p90_ratio(v) for k, v in sorted(by_regime.items())}
    if len(x) < 20 or len(set(groups)) < 3:
        return LearnedComm(params=params, meta={**meta, "trees": 0})
    xa, ya = np.asarray(x, dtype=float), np.asarray(y)
    dall = xgb.DMatrix(xa, label=ya, feature_names=list(FEATURES))
    sweeps = sorted(set(groups))
    folds = [
        (
            np.asarray([i for i, g in enumerate(groups) if g != s]),
            np.asarray([i for i, g in enumerate(groups) if g == s]),
        )
        for s in sweeps
    ]
    # (a pandas DataFrame: as_pandas defaults to True)
    cv: Any = xgb.cv(XGB_PARAMS, dall, num_boost_round=rounds, folds=folds, metrics="rmse", seed=0)
    best = int(np.argmin(cv["test-rmse-mean"].to_numpy())) + 1
    trees = _export(xgb.train(XGB_PARAMS, dall, num_boost_round=best), xa)
    q90 = {**XGB_PARAMS, "objective": "reg:quantileerror", "quantile_alpha": 0.9}
    trees_p90 = _export(xgb.train(q90, dall, num_boost_round=best), xa)
    return LearnedComm(trees, params=params, trees_p90=trees_p90, meta={**meta, "trees": best})


def _export(booster: Any, xa: Any) -> Trees:
    """Plain-Python trees of ``booster``, checked against xgboost's own predictions."""
    import json

    import numpy as np
    import xgboost as xgb

    trees = Trees.from_xgboost_json(json.loads(booster.save_raw("json")))
    check = booster.predict(xgb.DMatrix(xa[:5], feature_names=list(FEATURES)))
    if not np.allclose(check, [trees(row) for row in xa[:5].tolist()], atol=1e-4):
        raise RuntimeError("nccl model: exported trees disagree with xgboost")
    return trees


SHIPPED_MODEL = Path(__file__).resolve().parents[1] / "data" / "nccl-model.json"
_loaded: dict[tuple[str, float], LearnedComm] = {}


def load_model(path: Any = None) -> LearnedComm:
    """The model stored at ``path`` (default: the shipped ``planner/data/nccl-model.json``),
    cached by path and modification time, so a refit is picked up by the next plan; the bare
    prior when the file is missing."""
    path = Path(path or SHIPPED_MODEL)
    try:
        key = (str(path), path.stat().st_mtime)
    except OSError:
        return LearnedComm()
    if key not in _loaded:
        import json

        _loaded[key] = LearnedComm.from_dict(json.loads(path.read_text()))
    return _loaded[key]


def shipped_model() -> LearnedComm:
    return load_model(SHIPPED_MODEL)
