import json
import re

import pytest

pytestmark = pytest.mark.django_db


def test_the_catalog_page_needs_a_login(client, catalog):
    resp = client.get("/catalog/")
    assert resp.status_code == 302 and resp["Location"].startswith("/accounts/login/")


def test_it_lists_cuda_types_with_dollars_per_gpu_hour_in_the_region(client, user, catalog):
    client.force_login(user)
    page = client.get("/catalog/", {"region": "us-east-1"}).content.decode()
    assert "p4d.24xlarge" in page and "inf2.xlarge" not in page
    assert "On-demand $/GPU-h" in page and "plotly/plotly.min.js" in page
    everything = client.get("/catalog/", {"region": "us-east-1", "all": "1"}).content.decode()
    assert "inf2.xlarge" in everything


def test_rows_are_sorted_server_side_without_javascript(client, user, catalog):
    client.force_login(user)
    resp = client.get("/catalog/", {"region": "us-east-1", "sort": "od_per_gpu"})
    rows = resp.context["rows"]
    prices = [r.od_per_gpu for r in rows if r.od_per_gpu is not None]
    assert prices == sorted(prices)
    desc = client.get("/catalog/", {"region": "us-east-1", "sort": "-gpu_count"}).context["rows"]
    assert [r.gpu_count for r in desc] == sorted((r.gpu_count for r in desc), reverse=True)


def test_the_chart_gets_spot_history_per_zone(client, user, catalog):
    client.force_login(user)
    page = client.get("/catalog/", {"region": "us-east-1", "type": "p4d.24xlarge"}).content.decode()
    data = json.loads(re.search(r'id="history-data" type="application/json">(.*?)</script>', page).group(1))
    assert data["instance_type"] == "p4d.24xlarge"
    assert any(k.startswith("spot use1-") for k in data["series"])
    assert "on-demand us-east-1" in data["series"]


def test_plotly_is_served_from_the_python_package(client):
    from django.contrib.staticfiles import finders

    assert finders.find("plotly/plotly.min.js").endswith("plotly/package_data/plotly.min.js")


def test_home_lists_recent_runs_plans_and_jobs_of_the_team(client, user, make_run):
    run = make_run()
    client.force_login(user)
    page = client.get("/").content.decode()
    assert f'href="/profiling/{run.pk}/"' in page and "No plans yet" in page and "No jobs yet" in page
