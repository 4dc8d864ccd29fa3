"""Simulated GPUs with injectable faults, and the agent's configuration sources."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.__main__ import main
from agent.config import AgentConfig, ConfigError, load_config
from agent.gpu.fake import FakeGpuBackend, fake_gpu_uuid


def test_fake_gpus_have_stable_uuids_and_the_model_memory() -> None:
    inventory = FakeGpuBackend("h1", 8, "H100").inventory()

    assert [g.index for g in inventory] == list(range(8))
    assert {g.model for g in inventory} == {"H100"}
    assert {g.memory_mb for g in inventory} == {81559}
    assert {g.health for g in inventory} == {"healthy"}
    assert [g.uuid for g in inventory] == [g.uuid for g in FakeGpuBackend("h1", 8).inventory()]
    assert inventory[0].uuid.startswith("GPU-") and inventory[0].uuid == fake_gpu_uuid("h1", 0)
    assert len({g.uuid for g in inventory} | {g.uuid for g in FakeGpuBackend("h2", 8).inventory()}) == 16


def test_busy_gpus_run_hotter_than_idle_ones() -> None:
    backend = FakeGpuBackend("h1", 2, seed=1)
    backend.note_busy({1})

    for _ in range(10):
        idle, busy = backend.sample()

    assert idle.utilization_pct < 10 < 70 < busy.utilization_pct
    assert idle.power_w < busy.power_w
    assert idle.memory_used_mb < busy.memory_used_mb <= 81559


def test_fatal_xid_makes_the_gpu_unhealthy_until_cleared(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    backend = FakeGpuBackend("h1", 8, state_dir=tmp_path)

    assert main(["inject-fault", "--state-dir", str(tmp_path), "--gpu", "3", "--xid", "79"]) == 0
    faulty = backend.sample()
    assert (faulty[3].health, faulty[3].xids) == ("unhealthy", [79])
    assert backend.inventory()[3].health == "unhealthy"
    assert {s.health for i, s in enumerate(faulty) if i != 3} == {"healthy"}
    assert "GPU 3: unhealthy" in capsys.readouterr().out

    assert main(["inject-fault", "--state-dir", str(tmp_path), "--gpu", "3", "--clear"]) == 0
    assert (backend.sample()[3].health, backend.sample()[3].xids) == ("healthy", [])


def test_non_fatal_xid_is_listed_but_leaves_the_gpu_healthy(tmp_path: Path) -> None:
    backend = FakeGpuBackend("h1", 4, state_dir=tmp_path)

    main(["inject-fault", "--state-dir", str(tmp_path), "--gpu", "1", "--xid", "13"])
    main(["inject-fault", "--state-dir", str(tmp_path), "--gpu", "2", "--degraded"])
    main(["inject-fault", "--state-dir", str(tmp_path), "--gpu", "0", "--ecc", "1"])

    samples = backend.sample()
    assert [(s.health, s.xids) for s in samples] == [
        ("unhealthy", []),
        ("healthy", [13]),
        ("degraded", []),
        ("healthy", []),
    ]
    assert samples[0].ecc_uncorrected == 1
    main(["inject-fault", "--state-dir", str(tmp_path), "--clear"])
    assert {s.health for s in backend.sample()} == {"healthy"}


def test_a_broken_fault_file_keeps_the_last_known_health(tmp_path: Path) -> None:
    backend = FakeGpuBackend("h1", 4, state_dir=tmp_path)
    main(["inject-fault", "--state-dir", str(tmp_path), "--gpu", "3", "--xid", "48"])
    assert backend.sample()[3].health == "unhealthy"

    (tmp_path / "faults.json").write_text("{half written")

    assert backend.sample()[3].health == "unhealthy"


def test_config_precedence_is_file_then_env_then_options(tmp_path: Path) -> None:
    config_file = tmp_path / "agent.yaml"
    config_file.write_text("server: ws://file/ws/agent/\ntoken: from-file\ngpus: 4\nmodel: A100\nheartbeat: 2\n")
    environ = {"FAIRWAY_TOKEN": "from-env", "FAIRWAY_GPUS": "2", "FAIRWAY_STATE_DIR": str(tmp_path)}

    config = load_config({"gpus": 1, "host_name": "h7", "model": None}, config_file, environ)

    assert config == AgentConfig(
        server="ws://file/ws/agent/",
        token="from-env",
        host_name="h7",
        gpus=1,
        model="A100",
        state_dir=tmp_path,
        heartbeat=2.0,
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"token": "t"}, "server is required"),
        ({"server": "ws://s/"}, "token is required"),
        ({"server": "http://s/", "token": "t"}, "bad value for server"),
        ({"server": "ws://s/", "token": "t", "gpus": -1}, "bad value for gpus"),
        ({"server": "ws://s/", "token": "t", "heartbeat": 0}, "bad value for heartbeat"),
        ({"server": "ws://s/", "token": "t", "runtime": "kubernetes"}, "bad value for runtime"),
        ({"server": "ws://s/", "token": "t", "gpu_backend": "rocm"}, "bad value for gpu_backend"),
    ],
)
def test_bad_config_fails_loudly(options: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(options, None, {})


def test_unknown_key_in_the_config_file_fails_loudly(tmp_path: Path) -> None:
    config_file = tmp_path / "agent.yaml"
    config_file.write_text("server: ws://s/\ntoken: t\nheartbeat_s: 5\n")

    with pytest.raises(ConfigError, match="unknown key.*heartbeat_s"):
        load_config({}, config_file, {})


def test_simulated_gpus_get_stand_in_device_nodes_only_with_a_dev_dir(tmp_path: Path) -> None:
    assert FakeGpuBackend("h1", 2).device_nodes() == {}
    nodes = FakeGpuBackend("h1", 3, dev_dir=tmp_path / "dev").device_nodes()
    assert nodes == {i: str(tmp_path / "dev" / f"nvidia{i}") for i in range(3)}
    assert all(Path(p).is_file() and Path(p).stat().st_mode & 0o777 == 0o666 for p in nodes.values())
    assert (tmp_path / "dev").stat().st_mode & 0o777 == 0o755


def test_an_injected_xid_is_reported_once_like_an_nvml_event(tmp_path: Path) -> None:
    """NVML reports an XID event at one heartbeat (``nvml.py``: recent XIDs are handed over once;
    the GPU stays unhealthy). The fake repeated the injected XID at every heartbeat, so a host an
    operator resumed after an auto-drain drained again at its next heartbeat (try34)."""
    backend = FakeGpuBackend("h1", 4, state_dir=tmp_path)
    main(["inject-fault", "--state-dir", str(tmp_path), "--gpu", "3", "--xid", "79"])
    assert [(s.health, s.xids) for s in backend.sample()][3] == ("unhealthy", [79])
    assert [(s.health, s.xids) for s in backend.sample()][3] == ("unhealthy", [])  # once; still unhealthy
    main(["inject-fault", "--state-dir", str(tmp_path), "--gpu", "3", "--xid", "48"])
    assert backend.sample()[3].xids == [48]  # a new event is reported
    main(["inject-fault", "--state-dir", str(tmp_path), "--gpu", "3", "--clear"])
    assert backend.sample()[3].xids == []
    main(["inject-fault", "--state-dir", str(tmp_path), "--gpu", "3", "--xid", "79"])
    assert backend.sample()[3].xids == [79]  # after a clear, the same XID is an event again


@pytest.mark.parametrize(
    ("key", "value", "bound"),
    [
        ("heartbeat", 1e9, "at most 3600"),  # the agent then never heartbeated (or overflowed its wait)
        ("heartbeat", 0.001, "at least 0.05"),  # a heartbeat flood at the server
        ("heartbeat", "1e400", "finite number"),
        ("backoff_max", 1e12, "at most 3600"),  # a restarted server then waited years for this agent
        ("backoff_max", 0.01, "at least 1"),  # reconnects 100 times a second
    ],
)
def test_heartbeat_and_backoff_max_are_bounded_at_load(key: str, value: object, bound: str) -> None:
    """ops35: any positive ``heartbeat`` / ``backoff_max`` was taken; the bounds are the Welcome's
    heartbeat range (agent.protocol) and one second to one hour of reconnect backoff."""
    with pytest.raises(ConfigError, match=f"bad value for {key}.*{bound}"):
        load_config({"server": "ws://s/", "token": "t", key: value}, None, {})
    for fine in ("0.05", "3600") if key == "heartbeat" else ("1", "3600"):
        assert getattr(load_config({"server": "ws://s/", "token": "t", key: fine}, None, {}), key) == float(fine)


def test_an_injected_stall_reports_a_busy_gpu_at_zero_utilization(tmp_path: Path, capsys) -> None:
    """try56: FAIRWAY_IDLE_AFTER_S set low, an operator trying the fake backend never saw an idle
    alert: a busy fake GPU always drifts to 75-100 %. ``inject-fault --idle`` stalls the GPU (its
    work runs, the GPU reads 0 %, as a job stuck on I/O), healthy; ``--clear`` ends it."""
    backend = FakeGpuBackend("h1", 2, seed=1, state_dir=tmp_path)
    backend.note_busy({0, 1})

    assert main(["inject-fault", "--state-dir", str(tmp_path), "--gpu", "1", "--idle"]) == 0
    assert "GPU 1: healthy xids=[] ecc_uncorrected=0 idle" in capsys.readouterr().out
    for _ in range(5):
        busy, stalled = backend.sample()
    assert busy.utilization_pct > 50 and stalled.utilization_pct == 0.0
    assert stalled.health == "healthy" and backend.inventory()[1].health == "healthy"

    main(["inject-fault", "--state-dir", str(tmp_path), "--gpu", "1", "--clear"])
    for _ in range(5):
        stalled = backend.sample()[1]
    assert stalled.utilization_pct > 50


def test_a_gpu_its_attempt_left_reads_idle_at_once() -> None:
    """fake46: a drained, empty host's fake GPUs read 38 % and 19,571 MiB at the heartbeat after
    their attempt ended (utilization and memory drifted down from the busy values). As NVML, whose
    utilization is the share of the last sample period a kernel ran and whose memory used is the
    processes' allocations, a GPU no attempt holds reads 0 % and 0 MiB from its first idle sample;
    one an attempt holds reads the load it did (temperature and power still cool down slowly)."""
    backend = FakeGpuBackend("h1", 2, seed=1)
    assert [(s.utilization_pct, s.memory_used_mb) for s in backend.sample()] == [(0.0, 0), (0.0, 0)]
    backend.note_busy({0, 1})
    for _ in range(10):
        busy = backend.sample()
    assert all(s.utilization_pct > 50 and s.memory_used_mb > 60000 for s in busy)

    backend.note_busy({1})
    left, held = backend.sample()
    assert (left.utilization_pct, left.memory_used_mb) == (0.0, 0)
    assert held.utilization_pct > 50 and held.memory_used_mb > 60000
    assert left.power_w > 100 and left.temperature_c > 40  # it cools down over a few samples
