"""The OpenAPI schema: every operation has a summary and one of our tags, node/agent endpoints
are tagged internal (decided by their authentication class), and money is a decimal string."""

from __future__ import annotations

import pytest
from drf_spectacular.generators import SchemaGenerator

from srifty_web.openapi import INTERNAL, OPERATIONS, TAGS, node_only_operations, shape

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def generated() -> tuple[dict, SchemaGenerator]:
    generator = SchemaGenerator()
    return generator.get_schema(request=None, public=True), generator


@pytest.fixture(scope="module")
def schema(generated) -> dict:
    return generated[0]


def operations(schema: dict) -> dict[str, dict]:
    return {
        f"{m.upper()} {path}": op for path, methods in schema["paths"].items() for m, op in methods.items()
    }


def test_it_gives_every_operation_a_summary_and_exactly_one_declared_tag(schema):
    declared = {t["name"] for t in TAGS}
    ops = operations(schema)
    assert len(ops) >= 35
    missing = sorted(key for key, op in ops.items() if not op.get("summary", "").strip())
    untagged = sorted(
        key for key, op in ops.items() if len(op.get("tags", [])) != 1 or op["tags"][0] not in declared
    )
    assert missing == [] and untagged == []
    assert [t["name"] for t in schema["tags"]] == [t["name"] for t in TAGS]


def test_its_table_names_only_operations_that_exist(schema):
    assert sorted(set(OPERATIONS) - set(operations(schema))) == []


def test_it_tags_internal_exactly_the_endpoints_that_only_node_or_agent_tokens_may_call(generated):
    schema, generator = generated
    node_only = node_only_operations(generator.endpoints)
    internal = {key for key, op in operations(schema).items() if op["tags"] == [INTERNAL]}
    assert {shape(key) for key in internal} == node_only
    # the ones a reader expects there, and none of the user operations
    assert {
        "GET /api/v1/jobs/{id}/rendezvous/",
        "POST /api/v1/jobs/{id}/reports/",
        "GET /api/v1/jobs/{id}/agent.tar.gz",
        "GET /api/v1/profiling-runs/{id}/rendezvous/",
        "POST /api/v1/profiling-runs/{id}/events/",
        "GET /api/v1/agent.tar.gz",
    } <= internal
    assert not {"POST /api/v1/plans/", "GET /api/v1/jobs/{id}/", "POST /api/v1/auth/token/"} & internal


def test_it_documents_the_agent_token_instead_of_showing_agent_endpoints_as_open(schema):
    op = operations(schema)["POST /api/v1/profiling-runs/{id}/events/"]
    assert op["security"] == [{"agentToken": []}]
    assert schema["components"]["securitySchemes"]["agentToken"]["scheme"] == "bearer"


@pytest.mark.parametrize(
    ("component", "field"),
    [
        ("GpuOffer", "usd_per_hour"),
        ("GpuOffer", "usd_per_gpu_hour"),
        ("PricePoint", "usd_per_hour"),
        ("Price", "usd_per_hour"),
        ("InstanceType", "on_demand_usd"),
        ("InstanceType", "spot_usd"),
        ("Job", "spend_usd"),
        ("Job", "hourly_usd"),
        ("Job", "max_spend_usd"),
        ("Preview", "hourly_usd"),
        ("Preview", "max_spend_usd"),
        ("LaunchInstance", "price_per_hour"),
        ("LaunchInstance", "hourly_usd"),
    ],
)
def test_it_documents_money_as_a_decimal_string(schema, component, field):
    prop = schema["components"]["schemas"][component]["properties"][field]
    assert (prop["type"], prop["format"]) == ("string", "decimal")
    assert "decimal string" in prop["description"]
