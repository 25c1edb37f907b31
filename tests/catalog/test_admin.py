from io import BytesIO

import pytest

from catalog.importer import INSTANCE_COLUMNS
from catalog.models import InstanceType, OnDemandPrice

pytestmark = pytest.mark.django_db


def test_anonymous_visitors_are_sent_to_the_admin_login(client, catalog):
    resp = client.get("/admin/catalog/instancetype/")
    assert resp.status_code == 302 and "/admin/login/" in resp["Location"]


def test_a_user_who_is_not_staff_cannot_enter_the_admin(client, user, catalog):
    client.force_login(user)
    assert client.get("/admin/catalog/instancetype/").status_code == 302
    assert client.post("/admin/catalog/instancetype/import-csv/").status_code == 302


def test_staff_see_current_prices_and_can_search_and_filter(client, staff, catalog):
    client.force_login(staff)
    page = client.get("/admin/catalog/instancetype/", {"q": "p4d"}).content.decode()
    assert "p4d.24xlarge" in page and "g5.xlarge" not in page
    assert "Spot $/h (cheapest zone)" in page and "21.9576" in page  # p4d.24xlarge us-east-1 on-demand
    offered = set(
        InstanceType.objects.filter(offerings__zone__region__code="eu-west-1").values_list("name", flat=True)
    )
    absent = InstanceType.objects.exclude(name__in=offered).values_list("name", flat=True)[0]
    filtered = client.get("/admin/catalog/instancetype/", {"region": "eu-west-1", "all": ""}).context["cl"]
    names = {t.name for t in filtered.queryset}
    assert names == offered and absent not in names
    assert client.get("/admin/catalog/spotprice/").status_code == 200


def test_price_history_cannot_be_edited_or_deleted_in_the_admin(client, staff, catalog):
    client.force_login(staff)
    price = OnDemandPrice.objects.first()
    resp = client.post(f"/admin/catalog/ondemandprice/{price.pk}/change/", {"usd_per_hour": "0"})
    assert resp.status_code == 403
    assert client.post(f"/admin/catalog/ondemandprice/{price.pk}/delete/", {"post": "yes"}).status_code == 403
    price.refresh_from_db()
    assert price.usd_per_hour > 0


def test_staff_upload_a_csv_and_bad_rows_are_listed(client, staff, catalog):
    client.force_login(staff)
    header = ",".join(INSTANCE_COLUMNS)
    bad = f"{header}\ng5.xlarge,A10G,1.0,4.0,16.0,,abc,0.4,us-east-1,use1-az1,x86_64\n".encode()
    resp = client.post(
        "/admin/catalog/instancetype/import-csv/", {"instances": BytesIO(bad)}, format="multipart"
    )
    page = resp.content.decode()
    assert resp.status_code == 200 and "line 2: Price=&#x27;abc&#x27; is not a number" in page
    good = f"{header}\nzz9.xlarge,T4,1.0,4.0,16.0,,0.5,0.2,us-east-1,use1-az1,x86_64\n".encode()
    resp = client.post("/admin/catalog/instancetype/import-csv/", {"instances": BytesIO(good)})
    assert resp.status_code == 302
    assert InstanceType.objects.filter(name="zz9.xlarge").exists()


def test_the_refresh_action_queues_one_task_per_region(client, staff, catalog, settings):
    settings.TASKS = {"default": {"BACKEND": "django_tasks.backends.dummy.DummyBackend"}}
    from django_tasks import default_task_backend

    client.force_login(staff)
    pk = InstanceType.objects.get(name="p4de.24xlarge").pk
    resp = client.post(
        "/admin/catalog/instancetype/", {"action": "refresh_from_aws", "_selected_action": [pk]}
    )
    assert resp.status_code == 302
    regions = {r.args[0] for r in default_task_backend.results}
    assert regions and all(r.args[1] == ["p4de.24xlarge"] for r in default_task_backend.results)
