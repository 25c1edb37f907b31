"""The input-pipeline measurement: one loader worker's samples per second, image and text."""

import pytest

from profiler.agent.dataloader import measure, profile_entry
from workload.runs import data_kind


@pytest.mark.parametrize("kind", ["image", "small_image", "text"])
def test_it_measures_a_positive_rate_on_one_thread(kind):
    import torch

    before = torch.get_num_threads()
    rate = measure(kind, seconds=0.2)
    assert rate.kind == kind and rate.samples >= 10 and rate.samples_per_s_per_vcpu > 0
    assert rate.samples_per_s_per_vcpu == pytest.approx(rate.samples / rate.seconds)
    assert torch.get_num_threads() == before  # the agent's own thread count is given back


def test_image_decoding_is_far_slower_than_slicing_tokens():
    assert measure("image", 0.2).samples_per_s_per_vcpu * 20 < measure("text", 0.2).samples_per_s_per_vcpu


def test_a_small_in_memory_image_is_prepared_many_times_faster_than_a_jpeg_is_decoded():
    """Why ``small_image`` has its own default (planner/input_pipeline.py): no file, no decode."""
    small = measure("small_image", 0.3)
    assert small.samples_per_s_per_vcpu > 4 * measure("image", 0.3).samples_per_s_per_vcpu, small


def test_it_names_the_kinds_it_knows():
    with pytest.raises(ValueError, match="image, small_image, text"):
        measure("audio")


@pytest.mark.parametrize(
    ("shape", "kind"),
    [
        ((3, 224, 224), "image"),
        ((3, 32, 32), "small_image"),
        ((3, 64, 48), "small_image"),
        ((3, 65, 64), "image"),
        ((128,), "text"),
        ((4, 4), None),
        ((), None),
    ],
)
def test_the_data_kind_follows_the_input_shape(shape, kind):
    assert data_kind(shape) == kind


def test_the_profile_entry_measures_the_kind_of_the_input():
    entry = profile_entry((3, 224, 224), 0.2)
    assert entry["kind"] == "image" and entry["samples_per_s_per_vcpu"] > 0
    assert entry["samples_per_s_per_vcpu"] == pytest.approx(entry["samples"] / entry["seconds"])
    text = profile_entry((128,), 0.1)
    assert text["kind"] == "text" and "128 tokens" in text["detail"]
    assert profile_entry((10, 10), 0.1) is None
