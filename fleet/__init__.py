"""The nodes Srifty starts, for training jobs (``launcher``) and profiling runs (``profiler``)
alike, and their life before training starts; both apps use it and neither imports the other.

* ``fleet.prechecks``: what AWS would refuse, asked of typed node groups before anything is paid;
* ``fleet.boot``: the cloud-init scripts of profiling and training nodes;
* ``fleet.network``: per instance type, EFA interfaces and the NCCL / libfabric environment;
* ``fleet.rendezvous`` (and its endpoint, ``fleet.api``): one decision, who rank 0 is and when a
  node may go, over a typed ``Cluster``;
* ``fleet.bundle``: the agent tarball a node unpacks;
* ``fleet.reconcile``: the instances no live job or run accounts for, terminated.
"""
