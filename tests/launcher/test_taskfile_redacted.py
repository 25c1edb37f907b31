"""``taskfile.redacted`` hides a credential however the file writes it (issue 37 review): quoted
with YAML escapes, folded over lines, as a block, through an anchor; the shown file keeps its
lines (warnings name them) and still reads."""

from __future__ import annotations

import pytest
import yaml

from launcher import taskfile

WRITTEN = {
    "escaped": ('HF_TOKEN: "hf_\\x41bcdefgh"', "hf_Abcdefgh"),
    "single quotes doubled": ("HF_TOKEN: 'hf_ab''cdefgh'", "hf_ab'cdefgh"),
    "folded": ("HF_TOKEN: >-\n    hf_abcd\n    efgh", "hf_abcd efgh"),
    "block": ("HF_TOKEN: |\n    hf_abcdefgh", "hf_abcdefgh\n"),
    "plain over two lines": ("HF_TOKEN: hf_abcd\n    efgh", "hf_abcd efgh"),
}


@pytest.mark.parametrize("how", sorted(WRITTEN))
def test_a_credential_written_in_any_yaml_style_is_not_shown(how):
    written, value = WRITTEN[how]
    text = f'envs:\n  {written}\n  EPOCHS: 3\nsecrets:\n  DB: "pa\\u0073sword"\nrun: python train.py\n'
    spec = taskfile.parse_task(text)
    assert spec.envs["HF_TOKEN"] == value and spec.secret_values["DB"] == "password"
    shown = taskfile.redacted(text)
    back = taskfile.parse_task(shown)
    assert back.envs["HF_TOKEN"] == taskfile.REDACTED and back.secret_values["DB"] == taskfile.REDACTED
    assert back.envs["EPOCHS"] == "3" and back.run == "python train.py"
    assert value.strip() not in shown and "abcd" not in shown and "sword" not in shown
    assert shown.count("\n") == text.count("\n")  # every other key on its own line still


def test_a_credential_echoed_by_run_is_hidden_there_too():
    text = 'envs:\n  API_KEY: "key-\\x31234567"\nrun: echo key-1234567 && python train.py\n'
    shown = taskfile.redacted(text)
    assert "1234567" not in shown and "run: echo <redacted> && python train.py" in shown


def test_a_file_without_run_is_redacted_too():
    text = "envs:\n  HF_TOKEN: hf_abcdefgh\nresources:\n  accelerators: A100:8\n"
    assert "hf_abcdefgh" not in taskfile.redacted(text)


def test_other_envs_and_short_values_are_shown_as_written():
    text = "envs:\n  MODEL: llama-3-8b\n  MY_KEY: abc\nrun: python train.py\n"
    assert taskfile.redacted(text) == text


def test_a_redacted_or_credential_env_is_exported_as_given_at_launch_not_as_its_text():
    from tests.launcher.test_task_launch import option

    task = "envs:\n  HF_TOKEN: hf_abcdefgh\n  MODEL: llama\nrun: python train.py\n"
    for text in (task, taskfile.redacted(task)):
        [(_name, exported)] = taskfile.to_skypilot(option(), taskfile.parse_task(text))
        envs = yaml.safe_load(exported)["envs"]
        assert envs["HF_TOKEN"] is None and envs["MODEL"] == "llama"
        assert "hf_abcdefgh" not in exported and taskfile.REDACTED not in exported
