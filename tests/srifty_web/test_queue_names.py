"""Every background-work name is listed once in ``srifty_web.queue`` and bound by its app."""

import re

import pytest

from srifty_web import queue
from tests.test_import_cycles import PACKAGES, ROOT

# A call that names its work with a string literal instead of a constant of srifty_web.queue.
LITERAL_NAME = re.compile(r"""queue\.(provide|enqueue|enqueue_on_commit)\(\s*["']""")


def test_every_listed_name_is_provided_and_every_provided_name_is_listed():
    # the test settings load every app, so every AppConfig.ready has imported its tasks module
    assert queue.provided() == queue.NAMES


def test_it_refuses_to_provide_a_name_that_is_not_listed():
    with pytest.raises(ValueError, match="'launcher.lanuch_job' is not a background-work name"):
        queue.provide("launcher.lanuch_job", lambda *args: None)
    assert "launcher.lanuch_job" not in queue.provided()


@pytest.mark.parametrize("ask", [queue.enqueue, queue.enqueue_on_commit])
def test_it_refuses_to_queue_a_name_that_is_not_listed(ask):
    with pytest.raises(ValueError, match="srifty_web.queue.NAMES"):
        ask("profiler.start_runn", 1)


def test_a_listed_name_nobody_provides_is_a_lookup_error(monkeypatch):
    monkeypatch.delitem(queue._PROVIDERS, queue.STOP_RUN)
    with pytest.raises(LookupError, match="no background work is bound to 'profiler.stop_run'"):
        queue.enqueue(queue.STOP_RUN, 1)


def test_no_source_file_names_its_background_work_with_a_string():
    offenders = [
        f"{path.relative_to(ROOT)}:{n}"
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if LITERAL_NAME.search(line)
    ]
    assert offenders == []
