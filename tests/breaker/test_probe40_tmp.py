import json
import pytest
URLS = ["/api/v1/workloads/?limit=-1", "/api/v1/workloads/?limit=100000000000000000000", "/api/v1/workloads/?offset=100000000000000000000",
        "/api/v1/workloads/?offset=-5", "/api/v1/workloads/?offset=9223372036854775807", "/api/v1/workloads/?limit=1&offset=9223372036854775806",
        "/api/v1/workloads/?group=0", "/api/v1/workloads/?group=-1", "/api/v1/workloads/?state=", "/api/v1/workloads/?owner=",
        "/api/v1/workloads/?budget=%00", "/api/v1/workloads/?cluster=%00", "/api/v1/workloads/?owner=me&owner=researcher",
        "/api/v1/workloads/history/?since=0s", "/api/v1/workloads/history/?limit=100000", "/api/v1/groups/?owner=nobody", "/api/v1/groups/?limit=5&offset=99999999999999999999",
        "/api/v1/workloads/99999999999999999999/", "/api/v1/workloads/1/logs/?attempt=-1", "/api/v1/workloads/1/logs/?attempt=99999999999999999999",
        "/api/v1/hosts/?state=%00", "/api/v1/budgets/99999999999999999999/statement/", "/api/v1/budgets/1/statement/?since=99999d",
        "/api/v1/metrics/pyramid/?since=0001-01-01&until=9999-12-31", "/api/v1/workloads/?format=csv", "/api/v1/workloads/?format=%00"]
@pytest.mark.parametrize("u", URLS)
def test_probe(researcher_client, submission, cluster, hosts, u):
    researcher_client.post("/api/v1/workloads/", submission(gpu_count=1), format="json")
    r = researcher_client.get(u)
    open("/tmp/brk40/list.txt", "a").write(f"{u} -> {r.status_code} {r.content[:200]!r}\n")
