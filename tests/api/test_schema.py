"""The OpenAPI schema, Swagger UI and Redoc: served without network, valid, complete."""

from __future__ import annotations

import yaml
from django.test import Client
from rest_framework.test import APIClient


def test_schema_is_valid_and_lists_every_endpoint(db):
    response = APIClient().get("/api/schema/")

    assert response.status_code == 200
    schema = yaml.safe_load(response.content)
    assert schema["openapi"].startswith("3.")
    assert set(schema["paths"]) >= {
        "/api/v1/auth/login/",
        "/api/v1/auth/logout/",
        "/api/v1/me/",
        "/api/v1/tokens/",
        "/api/v1/tokens/{id}/",
        "/api/v1/budgets/",
        "/api/v1/budgets/tree/",
        "/api/v1/workloads/",
        "/api/v1/workloads/{id}/",
        "/api/v1/workloads/{id}/cancel/",
        "/api/v1/workloads/{id}/logs/",
        "/api/v1/clusters/",
        "/api/v1/hosts/",
        "/api/v1/hosts/{name}/drain/",
        "/api/v1/hosts/{name}/drain-now/",
        "/api/v1/metrics/",
    }
    submit = schema["paths"]["/api/v1/workloads/"]["post"]["responses"]
    assert submit["201"]["content"]["application/json"]["schema"]["$ref"].endswith("/WorkloadSubmitted")
    assert submit["400"]["content"]["application/json"]["schema"]["$ref"].endswith("/Error")


def test_swagger_ui_and_redoc_are_served_from_the_server_itself(db):
    client = Client()
    for url in ("/api/docs/", "/api/redoc/"):
        page = client.get(url).content.decode()
        assert "/static/drf_spectacular_sidecar/" in page
        assert "cdn." not in page and "unpkg" not in page
    assert client.get("/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js").status_code == 200


def test_unknown_api_paths_answer_in_the_error_format(researcher_client):
    for url in ("/api/v1/nope/", "/api/v1/budgets/1.5/", "/api/v1/hosts/%C2%84/"):
        response = researcher_client.get(url)
        assert response.status_code == 404
        assert response.json() == {"detail": "Not found.", "code": "not_found"}
    redirect = researcher_client.get("/api/v1/me")
    assert (redirect.status_code, redirect["Location"]) == (301, "/api/v1/me/")


def test_api_root_lists_the_endpoints(researcher_client):
    """tryout: the README says "REST API v1 at `/api/v1/`" and ``GET /api/v1/`` answered 404."""
    response = researcher_client.get("/api/v1/")
    assert response.status_code == 200
    links = response.json()
    for key in ("me", "tokens", "budgets", "budgets/tree", "workloads", "workloads/history", "clusters"):
        assert links[key] == f"http://testserver/api/v1/{key}/", key
    for key in ("hosts", "groups", "metrics", "metrics/pyramid", "notifications", "auth/login"):
        assert key in links, key
    assert links["schema"] == "http://testserver/api/schema/" and links["docs"] == "http://testserver/api/docs/"
    assert not any("{" in url or url.endswith("/api/v1/") for url in links.values())
    for key, url in links.items():
        if key not in ("schema", "docs", "auth/logout"):
            assert researcher_client.get(url).status_code in (200, 405), key  # an endpoint (405: POST only)


def test_api_root_is_authenticated_and_in_the_schema(db):
    response = APIClient().get("/api/v1/")
    assert response.status_code == 401 and response.json()["code"] == "not_authenticated"
    schema = yaml.safe_load(APIClient().get("/api/schema/").content)
    root = schema["paths"]["/api/v1/"]["get"]
    assert root["summary"] == "The API's endpoints" and "200" in root["responses"]


def test_shared_memory_is_documented_with_its_own_default(db):
    """tryout35: the schema said ``shared_memory`` null meant "the host's per-GPU share", as for
    ``memory``; a left-out shared memory is the runtime's default ``/dev/shm`` (docs/resources.md,
    ``fairway submit --shm``) and it is at most ``memory``."""
    schema = yaml.safe_load(APIClient().get("/api/schema/").content)
    fields = schema["components"]["schemas"]["WorkloadSubmitRequest"]["properties"]
    assert "per-GPU share" in fields["memory"]["description"]
    shm = fields["shared_memory"]["description"]
    assert "per-GPU share" not in shm and "dev/shm" in shm and "at most memory" in shm, shm
