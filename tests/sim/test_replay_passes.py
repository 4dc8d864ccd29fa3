"""The replay harness (bench/replay_passes.py, docs/simulation.md "Replaying passes") on a small capture:
6 hours of the Philly trace from day 43 (its busiest stretch) on 4 hosts × 8 GPUs, ~900 passes."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from bench import replay_passes as rp
from scheduler.policy import Decisions, IncrementalScheduler, Snapshot, schedule
from scheduler.sim.simulate import DAY, DEFAULT_TRACE, Inputs, SimConfig

START_DAY = 43.0
CFG = SimConfig(hosts=4, days=6 / 24)


@pytest.fixture(scope="module")
def inputs() -> Inputs:
    return rp.prepare_slice(CFG, START_DAY)  # the trace is read once (1.5 s)


@pytest.fixture(scope="module")
def captured(tmp_path_factory: pytest.TempPathFactory, inputs: Inputs) -> tuple[rp.RunResult, Path]:
    path = tmp_path_factory.mktemp("replay") / "small.pkl.gz"
    return rp.run(CFG, path, start_day=START_DAY, inputs=inputs), path


def test_the_capture_exercises_the_policy(captured: tuple[rp.RunResult, Path]) -> None:
    r, path = captured
    assert r.passes > 500 and r.deciding > 300
    for kind in ("starts", "stops", "nominations", "reservations"):
        assert r.totals[kind] > 10, kind
    assert r.totals["pending"] == 0  # the simulator runs without reasons
    header, passes = rp.read_capture(path)
    assert header["slice"]["start_day"] == START_DAY and header["slice"]["hosts"] == 4
    assert sum(1 for _ in passes) == r.passes
    assert header["trailer"] == {"passes": r.passes, "digest": r.digest}


def test_capture_is_deterministic_and_digest_only_run_agrees(
    captured: tuple[rp.RunResult, Path], inputs: Inputs
) -> None:
    r, _ = captured
    again = rp.run(CFG, None, start_day=START_DAY, inputs=inputs)
    assert (again.passes, again.digest, again.per_pass) == (r.passes, r.digest, r.per_pass)


def test_fresh_schedule_and_incremental_match_the_capture_on_every_pass(captured: tuple[rp.RunResult, Path]) -> None:
    r, path = captured
    res = rp.compare(path, checks=("fresh", "incremental"))
    assert res.ok, res.first.report() if res.first else ""
    assert res.passes == r.passes
    assert res.differing == {"fresh": [], "incremental": []}
    assert res.digest == r.digest  # the replayed chain equals the recorded one


def test_a_perturbed_decision_is_found_at_its_pass(captured: tuple[rp.RunResult, Path]) -> None:
    _, path = captured
    _, passes = rp.read_capture(path)
    k, now = next((i, s.now) for i, s, c, _ in passes if len(c["starts"]) >= 2 and i > 100)
    passes.close()
    target = {"now": now}

    def perturbed(snap: Snapshot) -> Decisions:
        dec = schedule(snap)
        if snap.now == now and dec.starts:
            dec.starts = dec.starts[1:]  # one start dropped
        return dec

    res = rp.compare(path, checks=("fresh",), fresh=perturbed, limit=k + 20)
    assert res.passes == k + 20
    assert not res.ok and res.first is not None
    assert res.first.now == target["now"] and res.first.check == "fresh"
    assert res.differing["fresh"][0] == res.first.index
    text = res.first.report()
    assert f"pass {res.first.index}" in text and "starts:" in text and "    - [" in text

    # The incremental check, fed a scheduler that moves one GPU of a start, is caught too.
    class Moved(IncrementalScheduler):
        def __call__(self, snap: Snapshot) -> Decisions:  # type: ignore[override]
            dec = super().__call__(snap)
            if snap.now == target["now"] and dec.starts:
                s = dec.starts[0]
                dec.starts[0] = replace(s, gpus=(("nowhere", 0), *s.gpus[1:]))
            return dec

    res = rp.compare(path, checks=("incremental",), incremental=Moved, limit=k + 1)
    assert res.differing["incremental"] and res.first is not None and res.first.now == target["now"]
    assert "nowhere" in res.first.report()


def test_digests_do_not_depend_on_order() -> None:
    from scheduler.policy import Start, Stop, StopReason

    a = Decisions(
        starts=[Start("w1", (("h1", 1), ("h1", 0)), True), Start("w0", (("h0", 0),), False)],
        stops=[Stop("a2", StopReason.PREEMPTED, "w1"), Stop("a1", StopReason.PREEMPTED, "w1")],
        nominations={"w1": (("h1", 2),), "w0": (("h0", 3),)},
        reservations={"h2": "w9", "h1": "w8"},
        reserved_start={"w9": 5, "w8": 7},
    )
    b = Decisions(
        starts=list(reversed([Start("w1", (("h1", 0), ("h1", 1)), True), Start("w0", (("h0", 0),), False)])),
        stops=[Stop("a1", StopReason.PREEMPTED, "w1"), Stop("a2", StopReason.PREEMPTED, "w1")],
        nominations={"w0": (("h0", 3),), "w1": (("h1", 2),)},
        reservations={"h1": "w8", "h2": "w9"},
        reserved_start={"w8": 7, "w9": 5},
    )
    assert rp.pass_digest(rp.canonical(a)) == rp.pass_digest(rp.canonical(b))
    b.reserved_start["w8"] = 8
    assert rp.pass_digest(rp.canonical(a)) != rp.pass_digest(rp.canonical(b))


def test_digest_file_round_trip_and_a_changed_pass_is_located(
    captured: tuple[rp.RunResult, Path], tmp_path: Path
) -> None:
    r, _ = captured
    f = tmp_path / "d.json"
    rp.write_digest_file(rp.digest_doc(r), f)
    doc = rp.read_digest_file(f)
    assert len(f.read_text().splitlines()) > r.passes  # one pass a line
    chk = rp.check_against(r, doc)
    assert chk.ok and chk.lines[-1].startswith("OK")

    k = r.passes // 2
    doc["per_pass"][k][1] = "0" * 16
    doc["digest"] = "0" * 64
    chk = rp.check_against(r, doc)
    assert not chk.ok and chk.first_pass == k
    assert any(line.startswith("DIFFERENT") for line in chk.lines)

    other = json.loads(json.dumps(doc))
    other["slice"]["hosts"] = 5
    chk = rp.check_against(r, other)
    assert not chk.ok and chk.lines[0].startswith("NOT COMPARABLE")


def test_a_truncated_capture_is_refused(captured: tuple[rp.RunResult, Path], tmp_path: Path) -> None:
    _, path = captured
    import gzip

    raw = gzip.decompress(path.read_bytes())
    bad = tmp_path / "bad.pkl"
    bad.write_bytes(raw[: len(raw) // 2])
    _, passes = rp.read_capture(bad)
    with pytest.raises(SystemExit, match="truncated"):
        for _ in passes:
            pass


def test_records_are_stored_by_field_name() -> None:
    """A checkout whose policy records gained a field with a default (as ``Attempt.release_at``
    was added) still reads a capture made before: records are rebuilt by keyword."""
    import io
    import pickle
    from dataclasses import dataclass, fields

    from scheduler.policy import Attempt

    @dataclass(frozen=True, slots=True)
    class Later:  # Attempt as a later checkout might have it: the same fields and one more
        id: str
        workload: str
        budget: str
        gpus: tuple
        allocated: bool
        min_runtime: int
        started_at: int | None
        stopping: bool = False
        charged_until: int | None = None
        release_at: int | None = None
        cpus: int | None = None
        memory: int | None = None
        later_field: int | None = None

    assert [f.name for f in fields(Later)][:-1] == [f.name for f in fields(Attempt)]
    a = Attempt("a1", "w1", "org/x", (("h0", 0), ("h0", 1)), True, 600, 100, stopping=True)
    buf = io.BytesIO()
    rp._Pickler(buf, protocol=pickle.HIGHEST_PROTOCOL).dump((a, a))

    class Reader(pickle.Unpickler):
        def find_class(self, module: str, name: str):  # type: ignore[no-untyped-def]
            return Later if name == "Attempt" else super().find_class(module, name)

    b, c = Reader(io.BytesIO(buf.getvalue())).load()
    assert b is c  # stored once
    assert isinstance(b, Later) and b.release_at is None
    assert (b.id, b.gpus, b.started_at, b.stopping) == ("a1", (("h0", 0), ("h0", 1)), 100, True)


def test_command_line_record_check_capture_compare(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The commands as documented (a digest file of their own), on a trace of the Philly jobs of
    2 hours of day 43 (a file of ~300 lines is read much faster than the whole trace)."""
    lines = DEFAULT_TRACE.read_text().splitlines(keepends=True)
    lo, hi = int(START_DAY * DAY), int(START_DAY * DAY) + 2 * 3600
    rows = [r for r in lines[1:] if lo <= int(r.split(",", 2)[1]) < hi]
    trace = tmp_path / "t.csv"
    trace.write_text(lines[0] + "".join(rows))
    digest, cap = str(tmp_path / "d.json"), str(tmp_path / "c.pkl.gz")
    sl = ["--trace", str(trace), "--days", str(2 / 24), "--hosts", "4", "--digest-file", digest, "--no-progress"]
    assert rp.main(["capture", "--record", "--capture", cap, *sl]) == 0
    out = capsys.readouterr().out
    assert "captured:" in out and "recorded" in out
    assert rp.main(["compare", "--capture", cap, "--digest-file", digest, "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "SAME decisions on all" in out and "recorded digest = the committed digest" in out

    doc = rp.read_digest_file(digest)
    doc["per_pass"][3][1] = "f" * 16
    doc["digest"] = "f" * 64
    rp.write_digest_file(doc, digest)
    assert rp.main(["digest", *sl]) == 1
    out = capsys.readouterr().out
    assert "DIFFERENT" in out and "first differing pass: #3 " in out
