import json
import pytest
from scheduler.models import Workload

CASES = [
    dict(after=["1", "1:any"]),
    dict(after=["1:ok", "#1:any"]),
    dict(after=[1.0]),
    dict(after="1,,1"),
    dict(after=[""]),
    dict(after=["999999999999999999"]),
    dict(max_runtime=0), dict(max_runtime=-5), dict(max_runtime="-5"), dict(max_runtime=10**30), dict(max_runtime="1e3"),
    dict(max_runtime=True), dict(max_runtime="7200.5"), dict(max_runtime=7200.0), dict(max_runtime="1h", min_runtime="2h"),
    dict(cpus=0), dict(cpus=-1), dict(cpus=1.5), dict(cpus="1.5"), dict(cpus=10**20), dict(cpus=True), dict(cpus="0"),
    dict(memory=0), dict(memory="0"), dict(memory="-1G"), dict(memory="1e400"), dict(memory="99999999999999999999T"),
    dict(memory="1.5G"), dict(memory="10000000G"), dict(memory="1 G"), dict(memory="1GiB"), dict(memory=True), dict(memory=1.5),
    dict(shared_memory="0"), dict(shared_memory="-1"), dict(shared_memory="100T"),
    dict(gpu_count=0), dict(gpu_count=-1), dict(gpu_count=16), dict(gpu_count=24), dict(gpu_count=10**12),
    dict(array="0-999%0"), dict(array="%5"), dict(array="5%1000"), dict(array="0-0"), dict(array="00000000000000000001"),
    dict(array="1-"), dict(array="-1"), dict(array="1,,2"), dict(array="0-9%01"), dict(array="0-1000"), dict(array=" 0-1 "),
    dict(retries=-1), dict(retries="3"), dict(retries=1.0),
    dict(min_runtime=-1), dict(min_runtime="1e9"), dict(min_runtime="0s"), dict(min_runtime="25h"),
]

@pytest.mark.parametrize("case", CASES, ids=[json.dumps(c)[:60] for c in CASES])
def test_probe(researcher_client, submission, cluster, hosts, case):
    first = researcher_client.post("/api/v1/workloads/", submission(gpu_count=1), format="json")
    assert first.status_code == 201
    n = Workload.objects.count()
    r = researcher_client.post("/api/v1/workloads/", submission(**{**case}), format="json")
    body = r.json()
    extra = ""
    if r.status_code == 201:
        extra = json.dumps({k: body.get(k) for k in ("after", "max_runtime_s", "cpus", "memory_bytes", "shared_memory_bytes", "gpu_count")})[:300]
    with open("/tmp/brk40/probe.txt", "a") as f:
        f.write(f"{json.dumps(case)[:80]} -> {r.status_code} {json.dumps(body)[:250] if r.status_code != 201 else extra} created={Workload.objects.count()-n}\n")
