"""Srifty profiling agent.

A plain package (no Django) that runs on a bare GPU or CPU machine with only torch,
torchvision and the standard library (``requests`` is used for HTTP when present). It builds and
inspects models with the top-level ``workload`` package, which ships beside it
(:func:`fleet.bundle.agent_tarball`).
It writes the profile JSON described in ``docs/profile-format.md``::

    python -m profiler.agent compute --model torchvision:resnet18 --input-shape 3,224,224 \
        --batch-sizes auto --device cuda --out r18.json
    python -m profiler.agent comm --world-size 8 --backend nccl --out comm.json

Importing this package is cheap: torch is only imported by the modules that need it.
"""

SCHEMA_VERSION = 1

__all__ = ["SCHEMA_VERSION"]
