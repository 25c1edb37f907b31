"""``manage.py calibrate_compute``: reproduces the shipped compute model's artefact."""

import json

import pytest
from django.core.management import CommandError, call_command

from planner.hardware import load_gpu_specs
from planner.perf.opclass import OpClassModel


@pytest.mark.django_db
def test_it_writes_a_model_the_planner_loads(tmp_path, settings, capsys):
    out = tmp_path / "compute-model.json"
    # seresnext: 9 train rows and 8 one-node scaling pairs, the whole fit (the kappa/delta grid
    # over its pairs too) in ~6 s; resnet's 102 rows and 61 pairs took ~26 s for the same path.
    call_command("calibrate_compute", "--families", "seresnext", "--output", str(out))
    assert "train samples" in capsys.readouterr().out
    doc = json.loads(out.read_text())
    assert (
        doc["meta"]["families"] == ["seresnext"] and doc["meta"]["made_by"] == "manage.py calibrate_compute"
    )
    assert doc["meta"]["scaling_pairs"] > 0
    model = OpClassModel.from_dict(doc, load_gpu_specs(settings.BASE_DIR / "catalog/fixtures/gpu_specs.csv"))
    assert model.theta and model.gpu_factors


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--jobs", "0"], "--jobs must be at least 1"),
        (["--families", "no-such-family"], "unknown no-such-family"),
        # alexnet rows are all a frozen test publisher's (dmikushin/cnn-benchmarks): none may be fitted
        (["--families", "alexnet"], "no train rows"),
        (["--output", "/no/such/dir/model.json"], "does not exist"),
    ],
)
def test_it_refuses_bad_arguments(args, message, tmp_path):
    out = ["--output", str(tmp_path / "model.json")] if "--output" not in args else []
    with pytest.raises(CommandError, match=message):
        call_command("calibrate_compute", *args, *out)  # never over the shipped model
