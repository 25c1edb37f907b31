import pytest

pytestmark = pytest.mark.django_db


def test_anonymous_readers_are_asked_to_authenticate(api, catalog):
    for url in ["/api/v1/instance-types/", "/api/v1/prices/", "/api/v1/accelerators/"]:
        resp = api.get(url)
        assert resp.status_code == 401, url
        assert "Token" in resp["WWW-Authenticate"]


def test_a_logged_in_user_reads_through_the_session_too(client, user, catalog):
    client.force_login(user)
    assert client.get("/api/v1/instance-types/").json()["count"] == 87


def test_the_api_is_read_only_even_for_staff(staff, catalog):
    from rest_framework.test import APIClient

    c = APIClient()
    c.force_authenticate(staff)
    assert c.delete("/api/v1/instance-types/p4d.24xlarge/").status_code == 405
    assert c.post("/api/v1/instance-types/", {"name": "x.y"}).status_code == 405


def test_it_filters_by_gpu_count_region_and_spot(user_api, catalog):
    data = user_api.get("/api/v1/instance-types/", {"gpu": "a100", "min_gpus": 8}).json()
    assert {t["name"] for t in data["results"]} == {"p4d.24xlarge"}
    east = user_api.get("/api/v1/instance-types/", {"region": "us-east-1", "gpu": "H100"}).json()["results"]
    assert all("us-east-1" in t["regions"] for t in east) and east
    spot = user_api.get(
        "/api/v1/instance-types/", {"region": "us-east-1", "spot": "true", "limit": 500}
    ).json()
    assert spot["count"] > 0 and all(t["spot_usd"] is not None for t in spot["results"])
    ddp = user_api.get("/api/v1/instance-types/", {"ddp": "true", "limit": 500}).json()["results"]
    assert ddp and all(not t["name"].startswith(("inf", "trn", "dl1", "f1", "f2", "g4ad")) for t in ddp)


def test_a_bad_filter_is_a_400_naming_the_parameter(user_api, catalog):
    resp = user_api.get("/api/v1/instance-types/", {"min_gpus": "lots"})
    assert resp.status_code == 400 and "min_gpus" in resp.json()
    resp = user_api.get("/api/v1/prices/", {"market": "auction"})
    assert resp.status_code == 400 and "market" in resp.json()
    resp = user_api.get("/api/v1/prices/", {"since": "2026-01-02T00:00:00Z", "until": "2026-01-01T00:00:00Z"})
    assert resp.status_code == 400 and "since" in resp.json()


def test_prices_come_with_history_and_region_filters(user_api, catalog):
    data = user_api.get("/api/v1/prices/", {"instance_type": "p4d.24xlarge", "region": "us-east-1"}).json()
    markets = {r["market"] for r in data["results"]}
    assert markets == {"on-demand", "spot"}
    assert all(r["region"] == "us-east-1" and r["source"] == "snapshot" for r in data["results"])
    spot = user_api.get("/api/v1/prices/", {"instance_type": "p4d.24xlarge", "zone": "use1-az6"}).json()
    assert all(r["zone"] == "use1-az6" and r["market"] == "spot" for r in spot["results"])


def test_one_instance_type_by_name_with_current_prices(user_api, catalog):
    t = user_api.get("/api/v1/instance-types/p4d.24xlarge/").json()
    assert t["accelerator"] == "A100" and t["efa_supported"] and float(t["on_demand_usd"]) > 0
    assert user_api.get("/api/v1/instance-types/nope.large/").status_code == 404


def test_accelerators_filter_by_kind(user_api, catalog):
    data = user_api.get("/api/v1/accelerators/", {"kind": "nvidia-gpu"}).json()
    assert "H100" in {a["name"] for a in data["results"]} and all(a["supports_ddp"] for a in data["results"])
    assert user_api.get("/api/v1/accelerators/", {"kind": "quantum"}).status_code == 400


def test_the_openapi_schema_and_offline_swagger_ui_are_served(client, user):
    resp = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert resp.status_code == 200
    schema = resp.json()
    assert "/api/v1/instance-types/" in schema["paths"] and "/api/v1/prices/" in schema["paths"]
    params = {p["name"] for p in schema["paths"]["/api/v1/instance-types/"]["get"]["parameters"]}
    assert {"gpu", "min_gpus", "region", "spot"} <= params
    docs = client.get("/api/docs/").content.decode()
    assert "drf_spectacular_sidecar/swagger-ui-dist" in docs and "cdn" not in docs.lower()
