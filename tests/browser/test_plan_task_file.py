"""The plan form takes an uploaded task file in a real browser (issue 37 item 2): the solved plan
ranks only what the file allows and its page lists what came from the file."""

from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.browser

FORM = {
    "spec": "torchvision:squeezenet1_1",
    "input_shape": "3,32,32",
    "samples_per_epoch": "100000",
    "epochs": "5",
    "deadline_hours": "12",
    "max_nodes": "4",
    "global_batch_min": "256",
    "global_batch_max": "512",
}
TASK = "resources:\n  accelerators: {A100: 8, H100: 8}\n  cpus: 32+\n  use_spot: true\nrun: python train.py\n"


@pytest.mark.timeout(300)
def test_an_uploaded_task_file_plans_and_the_page_says_what_came_from_it(staff_tab, tmp_path):
    page = staff_tab.page
    path = tmp_path / "train.sky.yaml"
    path.write_text(TASK)
    page.goto("/plans/")
    page.check("input[name=model_source][value=spec]")
    for name, value in FORM.items():
        page.fill(f"#plan-form input[name={name}]", value)
    page.select_option("#plan-form select[name=objective]", "cost")
    page.select_option("#plan-form select[name=regions]", ["us-east-1"])
    page.set_input_files("#plan-form input[name=task_file]", str(path))
    with page.expect_navigation(timeout=60_000):
        page.click("#plan-form button[type=submit]")
    assert re.search(r"/plans/\d+/$", page.url), page.inner_text("main")[:2000]
    page.wait_for_selector("#ranked-table", timeout=120_000)
    said = page.inner_text("#task-constraints")
    assert "From the task file train.sky.yaml" in said
    assert "accelerators: A100:8 or H100:8 (line 2)" in said and "cpus: 32+ (line 3)" in said
    configs = page.locator("#ranked-table td.config").all_inner_texts()
    assert configs and all(re.match(r"\d+x (p4d|p5)\.\d*xlarge \(spot\)", c) for c in configs), configs
    markets = {
        m for m in page.locator("#ranked-table tbody tr").evaluate_all("rs => rs.map(r => r.dataset.market)")
    }
    assert markets == {"spot"}
    staff_tab.shot("task-constraints")
    assert not staff_tab.errors, staff_tab.errors
