"""Issue 33 items 1 and 7: transformers config overrides are bounded before anything is built.

``POST /api/v1/plans/`` with ``transformers:bert(num_hidden_layers=1e300)`` got 202, and the
only task worker then built layers for ever (+20 MB/s); the same spec in a local profiling run
made the agent allocate real weights. ``hidden_size=1e999`` was an unhandled 500
(OverflowError); ``num_attention_heads=0`` and ``vocab_size=-5`` passed validation and failed
later. Each probe runs once in a forked child (``tests.support.probe.in_child``) and asserts a
clear refusal naming the field within seconds and a peak RSS growth under 200 MB; models that
train on the catalog's largest GPU (BERT-large, GPT-2) are still accepted.
"""

from __future__ import annotations

import json
import resource

import pytest
from rest_framework.test import APIClient

from tests.support.probe import in_child

pytestmark = pytest.mark.django_db

MAX_GROWTH_MB = 200
MAX_SECONDS = 10  # a refusal takes milliseconds; a slow shared 2-core host gets room
TIMEOUT_S = 30  # in_child kills the request after this: a finding, not a flake
# A probe that builds anyway (the old code) gets this much more address space, then MemoryError:
# the shared host must not be taken down by a test that is meant to fail.
SPARE_ADDRESS_SPACE = 3 * 2**30

RUNAWAY = "transformers:bert(num_hidden_layers=1e300)"
BERT_LARGE = (
    "transformers:bert(hidden_size=1024,num_hidden_layers=24,num_attention_heads=16,intermediate_size=4096)"
)
GPT2 = "transformers:gpt2"
GPT2_XL = "transformers:gpt2(n_embd=1600,n_layer=48,n_head=25)"
# BERT at width 8192 (64 heads, MLP 32768): ~0.8 billion parameters a layer.
WIDE_BERT = (
    "transformers:bert(hidden_size=8192,num_attention_heads=64,intermediate_size=32768,num_hidden_layers={})"
)


@pytest.fixture(autouse=True)
def _transformers_loaded():
    """Import transformers and its config registry in the test process, once: the probes measure
    what a request costs a warm server, not the first import of a library (a web process loads
    the registries before it serves: ``warm_model_registries``)."""
    from workload.specs import check_library_spec

    check_library_spec("transformers:bert")
    check_library_spec("transformers:gpt2")


@pytest.fixture
def client(user) -> APIClient:
    client = APIClient(raise_request_exception=False)  # a 500 is an answer to assert on
    client.force_authenticate(user)
    return client


def plan_body(spec: str, shape: str = "128") -> dict:
    return {
        "model": {"spec": spec, "input_shape": shape},
        "samples_per_epoch": 100_000,
        "epochs": 1,
        "objective": "cost",
        "deadline_hours": 24,
        "max_nodes": 2,
        "max_types": 1,
        "regions": ["us-east-1"],
        "global_batch_min": 64,
        "global_batch_max": 128,
    }


def run_body(spec: str, shape: str = "128") -> dict:
    return {"kind": "compute", "model_spec": spec, "input_shape": shape}


def post(client: APIClient, url: str, body: dict) -> tuple[int, str, int]:
    """(status, body text, plans and runs stored) of one POST: what the child sends back."""
    from planner.app.models import PlanRecord
    from profiler.models import ProfilingRun

    resp = client.post(url, body, format="json")
    stored = PlanRecord.objects.count() + ProfilingRun.objects.count()
    return resp.status_code, resp.content.decode(errors="replace")[:2000], stored


def with_address_space_cap(fn, *args):
    """``fn(*args)`` with the child's address space capped a few GB above what it maps now."""
    with open("/proc/self/status") as fh:
        vm_kb = next(int(line.split()[1]) for line in fh if line.startswith("VmSize:"))
    cap = vm_kb * 1024 + SPARE_ADDRESS_SPACE
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    return fn(*args)


def refused_within_bounds(probe, code: int = 400) -> str:
    """The probe's response body, after asserting the status, the time and the growth."""
    assert not probe.timed_out, f"the request still ran after {TIMEOUT_S} s"
    assert not probe.error, probe.error
    status, body, stored = probe.result
    print(f"probe: {status} in {probe.elapsed_s:.2f} s, +{probe.growth_mb:.0f} MB")  # the figures, with -s
    assert status == code, (status, body)
    assert stored == 0, "a refused request stored a plan or a run"
    assert probe.elapsed_s < MAX_SECONDS, probe
    assert probe.growth_mb < MAX_GROWTH_MB, probe
    return body


def spec_error(body: str) -> str:
    return json.loads(body)["model"]["spec"][0]


# --- the runaway layer count ------------------------------------------------------------------


def test_a_plan_with_1e300_layers_is_a_400_naming_the_field_within_seconds(client, catalog):
    probe = in_child(post, client, "/api/v1/plans/", plan_body(RUNAWAY), timeout_s=TIMEOUT_S)
    message = spec_error(refused_within_bounds(probe))
    assert "num_hidden_layers=1e+300 is a layer count: from 1 to 1024" in message


def test_a_profiling_run_with_1e300_layers_is_a_400_on_model_spec(client, catalog):
    probe = in_child(post, client, "/api/v1/profiling-runs/", run_body(RUNAWAY), timeout_s=TIMEOUT_S)
    assert "num_hidden_layers" in json.loads(refused_within_bounds(probe))["model_spec"][0]


def test_the_worker_refuses_a_queued_runaway_spec_before_it_builds(catalog):
    """A plan queued before the fix (or by the operator's own path) reaches the worker's
    ``workload``: it refuses the spec instead of tracing layers for ever."""
    from planner.app.service import PlanInputError, workload

    def count() -> str:
        try:
            workload(RUNAWAY, (128,), "amp")
        except PlanInputError as exc:
            return f"{exc.field} | {exc}"
        return "built"

    probe = in_child(with_address_space_cap, count, timeout_s=TIMEOUT_S)
    assert not probe.timed_out, f"the worker still built layers after {TIMEOUT_S} s"
    assert not probe.error, probe.error
    print(f"probe: {probe.result!r} in {probe.elapsed_s:.2f} s, +{probe.growth_mb:.0f} MB")
    assert probe.result.startswith("spec |") and "num_hidden_layers=1e+300 is a layer count" in probe.result
    assert probe.elapsed_s < MAX_SECONDS and probe.growth_mb < MAX_GROWTH_MB, probe


def test_the_agent_refuses_a_runaway_or_oversized_spec_before_it_allocates():
    """A local profiling run builds the model with real weights (``load_model``, the agent's
    builder): the same checks run there before the first layer."""
    from workload.specs import SpecError, load_model

    def build(spec: str) -> str:
        try:
            load_model(spec, num_classes=2, input_shape=(128,))
        except SpecError as exc:
            return str(exc)
        return "built"

    for spec, needle in [
        (RUNAWAY, "num_hidden_layers=1e+300 is a layer count"),
        (WIDE_BERT.format(40), "over the memory budget of 268.6 GiB"),
    ]:
        probe = in_child(with_address_space_cap, build, spec, timeout_s=TIMEOUT_S)
        assert not probe.timed_out, f"the agent still built {spec} after {TIMEOUT_S} s"
        assert not probe.error, probe.error
        print(f"probe: {probe.result[:100]!r} in {probe.elapsed_s:.2f} s, +{probe.growth_mb:.0f} MB")
        assert needle in probe.result
        assert probe.elapsed_s < MAX_SECONDS and probe.growth_mb < MAX_GROWTH_MB, probe


# --- values that are not sizes ----------------------------------------------------------------


def test_an_infinite_hidden_size_is_a_400_not_a_500(client, catalog):
    probe = in_child(
        post, client, "/api/v1/plans/", plan_body("transformers:bert(hidden_size=1e999)"), timeout_s=TIMEOUT_S
    )
    assert "hidden_size=inf is not a finite number" in spec_error(refused_within_bounds(probe))


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("num_attention_heads=0", "num_attention_heads=0 is a head count: from 1 to 1024"),
        ("vocab_size=-5", "vocab_size=-5 is a vocabulary size: from 1 to"),
        ("num_hidden_layers=2.5", "num_hidden_layers=2.5 must be a whole number"),
        ("hidden_size=1e12", "hidden_size=1e+12 is a width: from 1 to 131072"),
        ("max_position_embeddings=0", "max_position_embeddings=0 is a sequence length"),
        ("hidden_dropout_prob=1.5", "hidden_dropout_prob=1.5 is a probability: from 0 to 1"),
        ("layer_norm_eps=1e300", "layer_norm_eps=1e+300 is more than"),
    ],
)
def test_out_of_range_overrides_are_a_400_naming_the_field(client, catalog, override, message):
    resp = client.post("/api/v1/plans/", plan_body(f"transformers:bert({override})"), format="json")
    assert resp.status_code == 400, resp.content
    assert message in resp.json()["model"]["spec"][0]
    resp = client.post("/api/v1/profiling-runs/", run_body(f"transformers:bert({override})"), format="json")
    assert resp.status_code == 400 and message in resp.json()["model_spec"][0]


def test_fields_whose_default_is_below_the_limit_may_keep_it():
    """DeBERTa's ``max_relative_positions=-1`` means "use max_position_embeddings"; RoBERTa's
    ``type_vocab_size=1`` and a ``pad_token_id`` of 0 are ordinary."""
    from workload.specs import check_library_spec

    check_library_spec("transformers:deberta(max_relative_positions=-1,type_vocab_size=0)")
    check_library_spec("transformers:roberta(vocab_size=50265,max_position_embeddings=514,type_vocab_size=1)")
    check_library_spec(
        "transformers:bert(pad_token_id=0,hidden_dropout_prob=0,attention_probs_dropout_prob=1)"
    )


# --- the memory budget ------------------------------------------------------------------------


def _estimate(spec: str, shape: tuple[int, ...] = (128,)):
    from transformers import AutoConfig

    from workload import config_bounds, specs

    parsed = specs.parse_spec(spec)
    model_type, overrides = specs._hf_overrides(parsed)
    defaults = {key: getattr(AutoConfig.for_model(model_type), key) for key in overrides}
    config = specs._hf_config(parsed, 2)
    return config_bounds.estimate(config, overrides, defaults, num_classes=2, input_shape=shape)


@pytest.mark.parametrize(
    ("spec", "published"),
    [
        ("transformers:bert", 110e6),
        (BERT_LARGE, 335e6),
        (GPT2, 124e6),
        (GPT2_XL, 1558e6),
        ("transformers:llama", 6.74e9),  # the default config is Llama-2 7B
        ("transformers:mixtral", 46.7e9),
        ("transformers:mpt(d_model=8192,n_heads=64,n_layers=80,max_seq_len=2048,vocab_size=50368)", 64.86e9),
    ],
)
def test_the_parameter_estimate_is_within_a_tenth_of_published_counts(spec, published):
    assert _estimate(spec).params == pytest.approx(published, rel=0.1)


def test_a_config_just_over_the_gpu_budget_is_a_400_naming_the_budget_and_one_under_passes(client, catalog):
    from catalog.gpu_memory import largest_gpu_bytes
    from catalog.models import Accelerator, AcceleratorKind
    from workload.config_bounds import LARGEST_GPU_BYTES

    gpus = Accelerator.objects.filter(kind=AcceleratorKind.NVIDIA_GPU).exclude(memory_mib=None)
    biggest = max(gpus.values_list("memory_mib", flat=True))
    budget = largest_gpu_bytes()
    assert budget == biggest * 2**20 == LARGEST_GPU_BYTES  # B300 in the bundled catalog: 268.6 GiB
    layers = next(n for n in range(1, 100) if _estimate(WIDE_BERT.format(n)).total_bytes > budget)
    over, under = _estimate(WIDE_BERT.format(layers)), _estimate(WIDE_BERT.format(layers - 1))
    assert under.total_bytes <= budget < over.total_bytes  # one layer (~13 GiB of state) apart

    resp = client.post("/api/v1/plans/", plan_body(WIDE_BERT.format(layers)), format="json")
    assert resp.status_code == 400, resp.content
    message = resp.json()["model"]["spec"][0]
    assert "over the memory budget of 268.6 GiB, the largest GPU in the catalog" in message
    assert "billion parameters x 16 bytes" in message
    resp = client.post("/api/v1/profiling-runs/", run_body(WIDE_BERT.format(layers)), format="json")
    assert resp.status_code == 400 and "memory budget" in resp.json()["model_spec"][0]
    assert (
        client.post("/api/v1/plans/", plan_body(WIDE_BERT.format(layers - 1)), format="json").status_code
        == 202
    )


def test_the_budget_follows_the_catalogs_largest_gpu(client, catalog):
    from catalog.models import Accelerator

    Accelerator.objects.filter(memory_mib__gt=80 * 1024).update(memory_mib=80 * 1024)  # an H100 catalog
    resp = client.post("/api/v1/plans/", plan_body(GPT2_XL, "1024"), format="json")
    assert resp.status_code == 202, resp.content  # 1.6 B parameters: 25 GiB
    resp = client.post("/api/v1/plans/", plan_body("transformers:llama", "2048"), format="json")
    assert resp.status_code == 400  # 6.7 B parameters: 100 GiB of training state
    assert "over the memory budget of 80.0 GiB" in resp.json()["model"]["spec"][0]


def test_unmodelled_fields_that_grow_a_model_count_against_the_budget(client, catalog):
    """Swin's ``embed_dim`` is not in the transformer arithmetic: growing it scales the estimate
    by the square of its growth, and the refusal says so."""
    resp = client.post(
        "/api/v1/plans/", plan_body("transformers:swin(embed_dim=4096)", "3,224,224"), format="json"
    )
    assert resp.status_code == 400
    assert "embed_dim ×42.7" in resp.json()["model"]["spec"][0]


def test_the_sequence_length_counts_against_the_budget(client, catalog):
    spec = "transformers:mpt(d_model=4096,n_heads=32,n_layers=32,max_seq_len=100000)"
    assert client.post("/api/v1/plans/", plan_body(spec, "2048"), format="json").status_code == 202
    resp = client.post("/api/v1/plans/", plan_body(spec, "99999"), format="json")  # 445 GB of activations
    assert resp.status_code == 400 and "of activations for one sample" in resp.json()["model"]["spec"][0]


# --- what must still pass ---------------------------------------------------------------------


@pytest.mark.parametrize("spec", [BERT_LARGE, GPT2, GPT2_XL, "transformers:bert", "transformers:vit"])
def test_real_models_are_still_accepted(client, catalog, spec):
    shape = "3,224,224" if "vit" in spec else "512"
    resp = client.post("/api/v1/plans/", plan_body(spec, shape), format="json")
    assert resp.status_code == 202, resp.content
    resp = client.post("/api/v1/profiling-runs/", run_body(spec, shape), format="json")
    assert resp.status_code == 201, resp.content


def test_the_corpus_models_trained_with_fsdp_can_still_be_traced_on_the_meta_device():
    """MPT-70B is in the public corpus (FSDP on 128+ GPUs): the planner's calibration traces it
    on the meta device, which allocates nothing, so only the API refuses to plan it."""
    import torch

    from workload.specs import SpecError, check_library_spec, load_model

    spec = "transformers:mpt(d_model=8192,n_heads=64,n_layers=80,max_seq_len=2048,vocab_size=50368)"
    check_library_spec(spec)  # bounded fields: fine
    with pytest.raises(SpecError, match="memory budget"):
        check_library_spec(spec, memory_budget_bytes=275_040 * 2**20)
    with torch.device("meta"):
        model = load_model(spec.replace("n_layers=80", "n_layers=1"), num_classes=2, input_shape=(16,))
    assert next(model.parameters()).device.type == "meta"


# --- other numbers that reach a builder -------------------------------------------------------


@pytest.mark.parametrize("shape", ["0", "3,0,224", "3,99999,99999", "99999,99999"])
def test_a_plan_input_shape_with_an_empty_or_huge_sample_is_a_400(client, catalog, shape):
    resp = client.post("/api/v1/plans/", plan_body("torchvision:resnet18", shape), format="json")
    assert resp.status_code == 400, resp.content
    assert "input_shape" in resp.json()["model"]


@pytest.mark.parametrize("spec", ["torchvision:resnet18", "timm:resnet18", "transformers:bert"])
def test_num_classes_is_bounded_before_any_builder_runs(spec):
    from workload.specs import SpecError, load_model

    def build() -> str:
        try:
            load_model(spec, num_classes=10**9, input_shape=(3, 32, 32))
        except SpecError as exc:
            return str(exc)
        return "built"

    probe = in_child(with_address_space_cap, build, timeout_s=TIMEOUT_S)
    assert not probe.timed_out and not probe.error, probe
    assert "num_classes=1000000000 must be from 1 to 1000000" in probe.result
    assert probe.elapsed_s < MAX_SECONDS and probe.growth_mb < MAX_GROWTH_MB, probe
