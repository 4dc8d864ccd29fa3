"""left60: a root agent whose private /tmp could not be made (no mount namespace: a container
without CAP_SYS_ADMIN) runs the attempt with TMPDIR its fallback directory, said in its log; a
command run in it (``exec``) had no TMPDIR at all. Its environment is the attempt's."""

from __future__ import annotations

from pathlib import Path

import pytest
from agent_testkit import MARKERS, log_of, needs_root, patch_attempt_init, run_async, runtime, spec, wait_log

pytestmark = [pytest.mark.timeout(60)]

UNSHARE = 'check(libc.unshare(0x00020000 | 0x08000000), "unshare(CLONE_NEWNS|CLONE_NEWIPC)")'


@needs_root
def test_exec_gets_the_attempts_fallback_tmpdir(
    open_state: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    patch_attempt_init(monkeypatch, tmp_path, UNSHARE, 'check(-1, "unshare(CLONE_NEWNS|CLONE_NEWIPC)")')

    async def scenario() -> None:
        rt, _exits = runtime(open_state)
        await rt.start(spec(1, ["sh", "-c", f'echo "tmp=$TMPDIR"; exec sleep {MARKERS[0]}']))
        await wait_log(rt, 1, "tmp=")
        tmpdir = str(rt.store.run_dir(1) / "tmp")
        assert "no private /tmp, /var/tmp and /dev/shm" in log_of(rt, 1)
        assert f"tmp={tmpdir}\n" in log_of(rt, 1)
        got = await rt.exec(1, ["sh", "-c", 'echo "$TMPDIR"'], 10, 4096)
        assert got.stdout.decode() == f"{tmpdir}\n", got
        await rt.stop(1, 1)

    run_async(scenario(), timeout=40)
