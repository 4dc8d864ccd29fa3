"""Break session 30: a new user, then an attacker, on every surface (brk30)."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.scenarios.spec import ScenarioError, load_scenario

H = "name: x\nhosts: [{name: h1, gpus: 8}]\nbudgets: [{path: A, shares: 1}]\n"
STEP = "steps: [{tick: {}}]\n"


@pytest.mark.parametrize(
    ("text", "key"),
    [
        # an infinite lump of usage: OverflowError traceback in both backends
        (H + "usage: [{budget: A, gpu_hours: .inf}]\n" + STEP, "usage[0].gpu_hours"),
        # names the db backend's models refuse: the memory backend passed, the db one was a traceback
        ("name: x\nhosts: [{name: 'h\u200b1', gpus: 8}]\n" + STEP, "hosts[0].name"),
        ("name: x\nhosts: [{name: '-h', gpus: 8}]\n" + STEP, "hosts[0].name"),
        ("name: x\nhosts: [{name: '" + "h" * 127 + "', count: 20}]\n" + STEP, "hosts[0].name"),
        (H + "steps: [{add_host: {name: 'a b', gpus: 8}}]\n", "steps[0].add_host.name"),
        ("name: x\nhosts: [{name: h1, model: '" + "m" * 65 + "'}]\n" + STEP, "hosts[0].model"),
        ("name: x\nhosts: [{name: h1, labels: {rack: '" + "v" * 257 + "'}}]\n" + STEP, "hosts[0].labels"),
        ("name: x\nhosts: [{name: h1}]\nbudgets: [{path: '" + "a" * 101 + "'}]\n" + STEP, "budgets[0].path"),
        ("name: x\nhosts: [{name: h1}]\nbudgets: [{path: 'A//B'}]\n" + STEP, "budgets[0].path"),
        # integers and sizes past what the models store: OverflowError in the db backend
        (
            "name: x\nhosts: [{name: h1}]\nbudgets: [{path: A, shares: 99999999999999999999}]\n" + STEP,
            "budgets[0].shares",
        ),
        (H + "pending: [{id: P, budget: A, gpus: 99999999999999999999, min_runtime: 1h}]\n" + STEP, "pending[0].gpus"),
        ("name: x\nhosts: [{name: h1, memory: 999999P}]\n" + STEP, "hosts[0].memory"),
        # durations and instants past a datetime: the db backend's OverflowError, the memory one passed
        (H + "pending: [{id: P, budget: A, gpus: 1, min_runtime: 99999999d}]\n" + STEP, "pending[0].min_runtime"),
        (
            "name: x\nsettings: {start: '9999-12-31T23:59:59Z'}\nhosts: [{name: h1}]\nsteps: [{advance: 1d}]\n",
            "settings.start",
        ),
        (
            "name: x\nsettings: {tick_interval: 3650d}\nhosts: [{name: h1}]\nsteps: ["
            + ", ".join(["{advance: 3650d}"] * 11)
            + "]\n",
            "steps[10].advance",
        ),
    ],
)
def test_scenario_values_either_backend_refuses_fail_at_load(tmp_path: Path, text: str, key: str):
    """Both backends must give the same results (FORMAT.md): a value the db backend cannot store is
    refused when the file loads, with its key, never a traceback in one backend and a PASS in the other."""
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert key in str(info.value)


def test_scenario_host_name_rule_is_the_services_rule():
    from scheduler.scenarios import spec
    from scheduler.services import HOST_NAME_RE

    assert spec.HOST_NAME_RE.pattern == HOST_NAME_RE.pattern


def test_db_backend_runs_a_host_with_the_longest_name(tmp_path: Path, transactional_db: None):
    """A 128-character host name is valid, but its GPUs' UUIDs ``GPU-<host>-<i>`` passed 64 characters."""
    from scheduler.scenarios.db_backend import DbBackend
    from scheduler.scenarios.runner import run_scenario

    name = "h" * 128
    path = tmp_path / "long.yaml"
    path.write_text(
        f"name: x\nhosts: [{{name: '{name}', gpus: 2}}]\nbudgets: [{{path: A}}]\n"
        "pending: [{id: P, budget: A, gpus: 1, min_runtime: 1h}]\n"
        "steps: [{tick: {}, expect: {started: [P]}}]\n"
    )
    backend = DbBackend(scratch_db=False)
    try:
        result = run_scenario(str(path), backend, verbose=True)
    finally:
        backend.close()
    assert result.ok, "\n".join(result.lines)


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf"])
def test_a_spec_with_a_non_finite_number_is_a_usage_error(researcher, monkeypatch, tmp_path, value):
    """YAML's .nan passed the CLI's JSON check (json.dumps writes NaN) and the request then failed:
    "cannot reach the server: InvalidJSONError. Is the server running there?", exit 3."""
    from scheduler.models import Workload
    from tests.cli.inprocess import run_cli

    spec = tmp_path / "job.yaml"
    spec.write_text(f"budget: nlp/olmo\ngpu_count: {value}\ncommand: [x]\nmin_runtime: 1h\n")
    err = run_cli(monkeypatch, researcher, "submit", "-f", str(spec), expect=2)
    assert "JSON cannot carry" in err, err
    assert not Workload.objects.exists()


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        # an interval ending before it starts: stored, counted as nothing, listed in the statement's sources
        ({"start_1": "12:00:00", "end_1": "11:00:00", "gpus": "1"}, "ends before it starts"),
        # a negative lump: a budget's usage, ratio and statement went below zero
        ({"gpus": "", "gpu_seconds": "-3600"}, "0 GPU-seconds or more"),
        # both: the lump was silently ignored (an interval counts its GPUs only)
        ({"gpus": "1", "gpu_seconds": "3600"}, "either GPUs"),
    ],
)
def test_admin_refuses_a_usage_entry_that_cannot_mean_anything(admin, org_tree, cluster, fields, words):
    from django.test import Client

    from budgets.models import UsageEntry

    web = Client()
    web.force_login(admin)
    data = {
        "budget": org_tree["nlp/olmo"].pk,
        "cluster": cluster.pk,
        "start_0": "2026-01-05",
        "start_1": "10:00:00",
        "end_0": "2026-01-05",
        "end_1": "11:00:00",
        "gpus": "",
        "gpu_seconds": "0",
        "note": "correction",
        **fields,
    }
    response = web.post("/admin/budgets/usageentry/add/", data)
    assert response.status_code == 200, response.status_code
    assert words in response.content.decode()
    assert not UsageEntry.objects.exists()


@pytest.mark.parametrize(
    ("host_path", "container_path", "field"),
    [
        # docker binds are "host:container:mode": a colon in either path made every start of a
        # workload naming the mount fail on a docker host, the admin saw nothing wrong
        ("/data:/etc", "/data", "host_path"),
        ("/data", "/data:rw", "container_path"),
        # a line break in a path: stored, shown on two lines, and failing the same way
        ("/a\nb", "/data", "host_path"),
        # the container's root cannot be a mount point (docker: "destination can't be '/'")
        ("/data", "/", "container_path"),
    ],
)
def test_the_mount_catalog_refuses_paths_a_bind_cannot_carry(cluster, host_path, container_path, field):
    from django.core.exceptions import ValidationError

    from scheduler.models import Mount

    m = Mount(cluster=cluster, name="m", host_path=host_path, container_path=container_path, access="all")
    with pytest.raises(ValidationError) as exc:
        m.full_clean()
    assert field in exc.value.message_dict


@pytest.mark.parametrize("value", [3.10, 1e20, {"value": 2.50, "secret": True}])
def test_an_env_value_written_as_a_decimal_number_is_refused(api_client_for, researcher, hosts, value):
    """``PYTHON_VERSION: 3.10`` ran with ``3.1`` (and 1e20 with ``1e+20``): a number's written form is
    lost before the server sees it, so the value changed without a word; quote it. Integers keep
    their digits and stay accepted."""
    from scheduler.models import Workload

    body = {
        "budget": "nlp/olmo",
        "gpu_model": "A100",
        "gpu_count": 1,
        "min_runtime": "1h",
        "command": ["x"],
        "env": {"V": value, "N": 8},
    }
    response = api_client_for(researcher).post("/api/v1/workloads/", body, format="json")
    assert response.status_code == 400, response.content
    assert "quote it" in response.json()["env"][0]
    assert not Workload.objects.exists()
    body["env"] = {"N": 8}
    response = api_client_for(researcher).post("/api/v1/workloads/", body, format="json")
    assert response.status_code == 201, response.content
    assert Workload.objects.get().env["N"]["value"] == "8"


@pytest.mark.parametrize(
    "flags", [["-e", "A=1", "-e", "A=2"], ["-s", "TOKEN=x", "-e", "TOKEN=y"], ["-e", "A=1,B=2", "-s", "A=1,B=2"]]
)
def test_an_env_name_given_twice_on_the_command_line_is_a_usage_error(researcher, monkeypatch, flags):
    """``-e A=1 -e A=2`` ran with A=2 and ``-s TOKEN=x -e TOKEN=y`` with a plain TOKEN=x, silently,
    where the web form ("A is already set above") and a spec's YAML (a key given twice) refuse it."""
    from scheduler.models import Workload
    from tests.cli.inprocess import run_cli

    args = ["submit", "-b", "nlp/olmo", "-g", "1", "-m", "A100", "-M", "1h", *flags, "--", "x"]
    err = run_cli(monkeypatch, researcher, *args, expect=2)
    assert "given twice" in err, err
    assert not Workload.objects.exists()


def test_a_json_body_with_a_key_given_twice_is_refused(api_client_for, researcher, hosts):
    """``{"gpu_count": 1, ..., "gpu_count": 8}`` ran with 8: JSON keeps the last of a key given twice,
    silently, where a spec's YAML refuses it ("'gpu_count' is given twice")."""
    from scheduler.models import Workload

    body = (
        '{"budget": "nlp/olmo", "gpu_model": "A100", "gpu_count": 1, "min_runtime": "1h", '
        '"command": ["x"], "env": {"A": "1", "A": "2"}, "gpu_count": 8}'
    )
    client = api_client_for(researcher)
    response = client.post("/api/v1/workloads/", body, content_type="application/json")
    assert response.status_code == 400, response.content
    assert response.json()["code"] == "parse_error"
    assert "'A' is given twice" in response.json()["detail"]
    assert not Workload.objects.exists()


@pytest.mark.parametrize(("text", "read_as"), [("SEED: 010", 8), ("T: 1:30", 90), ("M: 0x1F", 31), ("B: 0b11", 3)])
def test_the_strict_reader_refuses_integers_yaml_reads_in_another_base(text, read_as):
    """YAML 1.1 reads ``010`` as octal 8, ``1:30`` as 90 (base 60), ``0x1F`` as 31: a spec's
    ``env: {SEED: 010}`` ran with SEED=8, ``min_runtime: 1:30`` (an hour and a half?) as 90 s."""
    import yaml

    from fairway_common import strict_yaml

    assert yaml.safe_load(text) == {text.split(":")[0]: read_as}
    with pytest.raises(strict_yaml.Refused) as refused:
        strict_yaml.load(text)
    assert refused.value.kind == "number_form" and refused.value.line == 1
    assert "decimal" in refused.value.problem


def test_the_strict_reader_still_reads_decimal_integers():
    from fairway_common import strict_yaml

    text = "a: 0\nb: -5\nc: +7\nd: 1_000\ne: 10\nf: 0.5\ng: '010'\n"
    assert strict_yaml.load(text) == {"a": 0, "b": -5, "c": 7, "d": 1000, "e": 10, "f": 0.5, "g": "010"}


def test_a_pasted_spec_with_an_octal_number_is_refused_on_the_form(researcher, hosts):
    from django.test import Client

    from scheduler.models import Workload

    web = Client()
    web.force_login(researcher)
    spec = "budget: nlp/olmo\ngpu_model: A100\ngpu_count: 1\nmin_runtime: 1h\ncommand: [x]\nenv: {SEED: 010}\n"
    response = web.post("/submit/", {"spec": spec})
    assert response.status_code == 400
    assert "line 6" in response.content.decode() and "decimal" in response.content.decode()
    assert not Workload.objects.exists()


def test_a_host_action_reason_over_500_characters_changes_nothing_on_the_web(admin, hosts):
    """The clusters page cut a longer reason to 500 characters and cordoned the host with the cut
    text, where the API and the service refuse it: the same refusal, nothing changed."""
    from django.test import Client

    from scheduler.models import Host, HostEvent

    web = Client()
    web.force_login(admin)
    events = HostEvent.objects.count()
    response = web.post("/hosts/a100-1/cordon/", {"reason": "r" * 501}, follow=True)
    assert response.status_code == 200
    assert b"at most 500 characters" in response.content
    assert Host.objects.get(name="a100-1").state == Host.State.ACTIVE
    assert HostEvent.objects.count() == events
