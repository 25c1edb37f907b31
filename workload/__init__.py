"""Model inspection: what a training step of a model is, before any GPU measures it.

A plain package with no Django, no planner and no profiler import (``tests/test_import_cycles.py``
checks it), read by both sides of the project:

* the GPU agent (``profiler/agent``), which ships it in its tarball (``fleet.bundle``) and runs
  it on a bare torch machine;
* the planner, which reads the schema and builds library models on the ``meta`` device.

Modules:

* :mod:`workload.specs` - a ``--model`` spec to an ``nn.Module`` (library registries; code
  specs only where code may run);
* :mod:`workload.config_bounds` - bounds on a spec's config overrides, arithmetic only;
* :mod:`workload.cost` - the schema of a workload (:class:`~workload.cost.WorkloadCost`,
  ``PHASES``, operator classes, ``precision_family``) and the meta-device tracer and counter;
* :mod:`workload.buckets` - DDP's gradient buckets, as a pure function;
* :mod:`workload.memory` - the peak memory of one training step (saved activations, state);
* :mod:`workload.runs` - the rules of a profiling run the planner reads too: the batch ladder,
  per-device iteration defaults, the precision a step runs as, the input's data kind.

Importing it is cheap: torch and the model zoos are imported by the functions that need them.
"""
