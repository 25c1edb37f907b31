"""Turning --model specs into modules: torchvision names, user factories, and errors."""

from __future__ import annotations

import pytest

from workload.specs import SpecError, load_model, logits_of, parse_spec


def test_torchvision_spec_builds_an_untrained_model_with_the_requested_classes():
    model = load_model("torchvision:resnet18", num_classes=7)
    assert model.fc.out_features == 7
    assert model.training


def test_user_factory_spec_gets_num_classes_and_input_shape():
    import torch

    model = load_model(
        "examples.tiny_model:build_transformer", num_classes=5, input_shape=(16, 24), allow_code=True
    )
    out = model(torch.randn(2, 16, 24))
    assert out.shape == (2, 5)
    cnn = load_model("examples.tiny_model:build", num_classes=3, input_shape=(1, 28, 28), allow_code=True)
    assert cnn(torch.randn(2, 1, 28, 28)).shape == (2, 3)


def test_factory_can_be_loaded_from_a_file_path(tmp_path):
    path = tmp_path / "my_model.py"
    path.write_text("import torch\ndef make():\n    return torch.nn.Linear(4, 2)\n")
    model = load_model(f"{path}:make", allow_code=True)
    assert model.out_features == 2


def test_unknown_torchvision_model_is_an_error_with_suggestions():
    with pytest.raises(SpecError, match="unknown torchvision classification model 'resnet19'.*resnet18"):
        load_model("torchvision:resnet19")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("resnet18", "bad model spec"),
        ("torchvision:", "bad model spec"),
        ("no_such_module_xyz:build", "cannot import model module"),
        ("examples.tiny_model:nope", "has no attribute"),
        ("examples.tiny_model:TinyCNN.__doc__", "not callable"),
        ("json:dumps", "model factory dumps.*failed: TypeError"),
        ("collections:OrderedDict", "not a torch.nn.Module"),
    ],
)
def test_bad_specs_are_rejected_with_a_clear_message(spec, message):
    with pytest.raises(SpecError, match=message):
        load_model(spec, allow_code=True)


def test_spec_parsing_keeps_the_kind_and_target():
    assert str(parse_spec("torchvision:vit_b_16")) == "torchvision:vit_b_16"
    assert parse_spec("pkg.mod:factory").kind == "factory"


def test_logits_are_found_in_tuples_and_named_outputs():
    import torch

    t = torch.zeros(2, 3)
    assert logits_of(t) is t
    assert logits_of((t, torch.ones(1))) is t
    assert logits_of({"logits": t}) is t


def test_code_specs_are_built_only_when_code_is_allowed(monkeypatch):
    from workload import specs

    imported = []
    monkeypatch.setattr(specs, "_import_target", lambda name: imported.append(name))
    with pytest.raises(SpecError, match="names model code"):
        load_model("examples.tiny_model:build")
    assert imported == []


def test_timm_and_transformers_models_are_built_from_their_registries():
    import torch

    vit = load_model("timm:test_vit", num_classes=4, input_shape=(3, 160, 160))
    assert vit(torch.randn(2, 3, 160, 160)).shape == (2, 4)
    bert = load_model(
        "transformers:bert(num_hidden_layers=1,hidden_size=32,num_attention_heads=2,intermediate_size=64)",
        num_classes=3,
        input_shape=(16,),
    )
    assert bert(torch.randn(2, 16)).shape == (2, 3)  # float input mapped to token ids, classification head
    gpt = load_model("transformers:gpt2(n_layer=1,n_embd=32,n_head=2)", num_classes=3, input_shape=(16,))
    assert gpt(torch.randn(2, 16)).shape == (2, 16, gpt.inner.config.vocab_size)  # causal-LM head


def test_transformers_overrides_must_name_numeric_fields_of_the_config():
    from workload.specs import check_library_spec

    assert check_library_spec("transformers:bert(num_hidden_layers=2)").kind == "transformers"
    for bad in (
        "transformers:bert(name_or_path=1)",
        "transformers:bert(hidden_act=1)",
        "transformers:bert(_private=1)",
        "transformers:bert(num_hidden_layers=x)",
    ):
        with pytest.raises(SpecError):
            check_library_spec(bad)
    with pytest.raises(SpecError, match="encoder-decoder"):
        load_model("transformers:t5", input_shape=(8,))


def test_library_models_trace_on_the_meta_device():
    from workload.cost import check_trace, trace_workload

    spec = "transformers:bert(num_hidden_layers=1,hidden_size=32,num_attention_heads=2,intermediate_size=64)"
    trace = trace_workload(lambda: load_model(spec, 2, (16,)), (16,), model_spec=spec, num_classes=2)
    assert check_trace(trace)["bucket_sizes"] and trace["cost"]["ops"]["forward"]
