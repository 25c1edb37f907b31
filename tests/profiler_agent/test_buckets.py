"""DDP-like bucket grouping (a pure function) against DDP's own assignment."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workload.buckets import DEFAULT_BUCKET_CAP_BYTES, DEFAULT_FIRST_BUCKET_BYTES, MiB, ddp_buckets


def test_buckets_follow_ddp_reverse_order_with_small_first_bucket():
    sizes = [400_000, 600_000, 300_000, 800_000]  # registration order
    buckets = ddp_buckets(sizes, first_cap=MiB, cap=25 * MiB)
    # From the last parameter: 800k + 300k reach 1 MiB and close bucket 0; the rest fit in 25 MiB.
    assert [b.param_indices for b in buckets] == [[3, 2], [1, 0]]
    assert [b.size_bytes for b in buckets] == [1_100_000, 1_000_000]
    assert [b.index for b in buckets] == [0, 1]
    assert buckets[0].num_params == 2


def test_bucket_closes_as_soon_as_it_reaches_its_cap():
    buckets = ddp_buckets([10, 10, 10, 10], first_cap=20, cap=20)
    assert [b.param_indices for b in buckets] == [[3, 2], [1, 0]]


def test_parameter_larger_than_the_cap_gets_a_bucket_of_its_own():
    buckets = ddp_buckets([5, 100, 5], first_cap=10, cap=50)
    assert [b.param_indices for b in buckets] == [[2, 1], [0]]
    assert buckets[0].size_bytes == 105


def test_no_parameters_give_no_buckets_and_bad_caps_are_rejected():
    assert ddp_buckets([]) == []
    with pytest.raises(ValueError):
        ddp_buckets([1], first_cap=0)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=3 * MiB // 4), min_size=1, max_size=40))
def test_buckets_match_torch_ddp_assignment_in_gradient_ready_order(numels):
    import torch
    import torch.distributed as dist

    tensors = [torch.empty(n, dtype=torch.float32) for n in numels]
    order = list(reversed(range(len(tensors))))  # gradients become ready last-layer first
    expected, _limits = dist._compute_bucket_assignment_by_size(
        [tensors[i] for i in order], [dist._DEFAULT_FIRST_BUCKET_BYTES, DEFAULT_BUCKET_CAP_BYTES], [], order
    )
    ours = ddp_buckets([4 * n for n in numels], DEFAULT_FIRST_BUCKET_BYTES, DEFAULT_BUCKET_CAP_BYTES)
    assert [b.param_indices for b in ours] == expected
    assert sorted(i for b in ours for i in b.param_indices) == list(range(len(numels)))


def test_first_bucket_cap_is_ddps_default():
    import torch.distributed as dist

    assert DEFAULT_FIRST_BUCKET_BYTES == dist._DEFAULT_FIRST_BUCKET_BYTES
