"""Command line of the Fairway agent.

    FAIRWAY_TOKEN=T python -m agent run --server ws://127.0.0.1:8000/ws/agent/ --host-name h1 \\
        --gpus 8 --model H100 --state-dir DIR --heartbeat 5 [--config agent.yaml]
        # exit 77: an admin removed the host (the install script's unit does not restart it)
    python -m agent inject-fault --state-dir DIR --gpu 3 --xid 79 [--xid 31] [--ecc 1] [--degraded] [--no-utilization]
    python -m agent inject-fault --state-dir DIR [--gpu 3] --clear
    FAIRWAY_JOIN_TOKEN=fwj_... python -m agent join --server http://fairway:8000 --config agent.yaml \
        --state-dir DIR [--gpu-backend nvml|fake --gpus 2 --model H100] [--runtime process|docker]
    python -m agent gpus [--gpu-backend nvml]     # inventory, one sample and health per GPU
    python -m agent health [--config agent.yaml | --state-dir DIR] [--json]   # exit 1: unhealthy

``fairway-agent`` (the console script of the installed package) is the same command.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import socket
import sys
from pathlib import Path

from agent import AGENT_VERSION
from agent.client import EXIT_HOST_REMOVED, HOST_REMOVED_FILE, Agent, HostRemoved, told_at_text
from agent.config import ENV_PREFIX, GPU_BACKENDS, RUNTIMES, AgentConfig, ConfigError, load_config
from agent.gpu.base import GpuBackend, GpuUnavailable
from agent.gpu.fake import FakeGpuBackend, Fault, fault_problem, read_faults, write_faults
from agent.join import JOIN_TOKEN_ENV
from agent.runtime.base import Runtime, RuntimeUnavailable
from agent.runtime.isolation import Isolation


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m agent", description="Fairway host agent")
    parser.add_argument("--version", action="version", version=f"fairway-agent {AGENT_VERSION}")
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="connect to the server and run attempts")
    run.add_argument("--config", type=Path, help=f"YAML config file (env {ENV_PREFIX}CONFIG)")
    run.add_argument("--server", help="websocket URL, e.g. ws://127.0.0.1:8000/ws/agent/")
    run.add_argument("--token", help="refused: the host token goes in the config file or FAIRWAY_TOKEN")
    run.add_argument("--host-name", dest="host_name", help="host name (default: this machine's)")
    run.add_argument("--gpus", type=int, help="number of simulated GPUs (default 8)")
    run.add_argument("--model", help="simulated GPU model (default H100)")
    run.add_argument("--gpu-memory-mb", dest="gpu_memory_mb", type=int, help="simulated GPU memory, MiB")
    run.add_argument("--state-dir", dest="state_dir", help="state directory (default /var/lib/fairway-agent)")
    run.add_argument("--heartbeat", type=float, help="heartbeat period in seconds until the server sets one")
    run.add_argument("--backoff-max", dest="backoff_max", type=float, help="longest reconnect delay, s")
    run.add_argument("--gpu-backend", dest="gpu_backend", choices=GPU_BACKENDS)
    run.add_argument("--runtime", choices=RUNTIMES)
    run.add_argument("--log-level", dest="log_level", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    run.add_argument("--log-max-bytes", dest="log_max_bytes", type=int, help="cap of each attempt's log, bytes")
    run.add_argument("--docker-url", dest="docker_url", help="Docker Engine API, e.g. unix:///run/podman/podman.sock")

    join = commands.add_parser("join", help=f"exchange a join token (env {JOIN_TOKEN_ENV}) for a host token")
    join.add_argument("--server", required=True, help="the server's http(s) URL, e.g. https://fairway.example.org")
    join.add_argument("--config", type=Path, required=True, help="config file to write (mode 0600)")
    join.add_argument("--host-name", dest="host_name", default=None, help="host name (default: this machine's)")
    join.add_argument("--state-dir", dest="state_dir", help="state directory to write into the config")
    join.add_argument("--gpu-backend", dest="gpu_backend", choices=GPU_BACKENDS, default="nvml")
    join.add_argument("--gpus", type=int, help="number of simulated GPUs (fake backend)")
    join.add_argument("--model", help="simulated GPU model (fake backend)")
    join.add_argument("--runtime", choices=RUNTIMES, default="process")
    join.add_argument("--docker-url", dest="docker_url", help="Docker Engine API address (docker runtime)")
    join.add_argument("--label", action="append", default=[], help="host label KEY=VALUE (repeatable)")

    gpus = commands.add_parser("gpus", help="print the GPU inventory, one sample and the health of every GPU")
    gpus.add_argument("--gpu-backend", dest="gpu_backend", choices=GPU_BACKENDS, default="nvml")
    gpus.add_argument("--gpus", type=int, default=8, help="number of simulated GPUs (fake backend)")
    gpus.add_argument("--model", default="H100", help="simulated GPU model (fake backend)")

    health = commands.add_parser("health", help="the running agent's health from its state dir (exit 1: unhealthy)")
    health.add_argument("--config", type=Path, help=f"YAML config file (env {ENV_PREFIX}CONFIG), for its state_dir")
    health.add_argument("--state-dir", dest="state_dir", help="state directory (default: the config's)")
    health.add_argument("--json", action="store_true", help="print the health file and the problems as JSON")

    fault = commands.add_parser("inject-fault", help="inject or clear a fault of a simulated GPU")
    fault.add_argument("--state-dir", dest="state_dir", type=Path, required=True)
    fault.add_argument("--gpu", type=int, help="GPU index (required unless --clear)")
    fault.add_argument("--xid", type=int, action="append", default=[], help="XID to report (repeatable)")
    fault.add_argument("--ecc", type=int, default=0, help="uncorrectable ECC errors (>0: unhealthy)")
    fault.add_argument("--degraded", action="store_true", help="flag the GPU degraded")
    fault.add_argument(
        "--idle", action="store_true", help="stall the GPU: 0 %% utilization even while busy (idle GPU alerts)"
    )
    fault.add_argument(
        "--no-utilization",
        dest="no_utilization",
        action="store_true",
        help="make the GPU's utilization unreadable (null, as NVML on a MIG-mode GPU)",
    )
    fault.add_argument("--clear", action="store_true", help="clear the GPU's faults (all GPUs without --gpu)")
    return parser


def make_gpu_backend(
    kind: str,
    host: str,
    gpus: int = 8,
    model: str = "H100",
    memory_mb: int | None = None,
    state_dir: Path | None = None,
) -> GpuBackend:
    """The GPU backend ``kind`` (``nvml`` or ``fake``; the other arguments describe fake GPUs).

    Raises:
        GpuUnavailable: ``nvml`` without a usable NVIDIA driver (one-line explanation).
    """
    if kind == "nvml":
        from agent.gpu.nvml import NvmlGpuBackend

        return NvmlGpuBackend()
    dev_dir = state_dir / "dev" if state_dir is not None else None  # stand-in device nodes
    return FakeGpuBackend(host, gpus, model, memory_mb=memory_mb, state_dir=state_dir, dev_dir=dev_dir)


def make_runtime(
    config: AgentConfig, isolation: Isolation | None = None, gpu_nodes: dict[int, str] | None = None
) -> Runtime:
    """The runtime named by ``config.runtime``; ``gpu_nodes``: each GPU's device node by index
    (:meth:`GpuBackend.device_nodes`), which the process runtime hides from attempts not given it
    and both runtimes sweep at an attempt's end.

    Raises:
        RuntimeUnavailable: ``docker`` without a reachable Docker Engine API.
    """
    isolation = isolation or Isolation(config.isolation)
    if config.runtime == "docker":
        from agent.runtime.docker import DockerRuntime

        return DockerRuntime(
            config.state_dir,
            base_url=config.docker_url or None,
            nvidia=config.gpu_backend == "nvml",  # fake GPUs have no devices to request
            log_max_bytes=config.log_max_bytes,
            isolation=isolation,
            gpu_nodes=gpu_nodes,
        )
    from agent.runtime.process import ProcessRuntime

    return ProcessRuntime(
        config.state_dir, log_max_bytes=config.log_max_bytes, isolation=isolation, gpu_nodes=gpu_nodes
    )


def _join(args: argparse.Namespace) -> int:
    from agent.join import JoinFailed, join

    host_name = args.host_name or socket.gethostname()
    labels: dict[str, str] = {}
    for item in args.label:
        key, sep, value = item.partition("=")
        if not sep or not key:
            print(f"join: bad --label {item!r} (KEY=VALUE)", file=sys.stderr)
            return 2
        labels[key] = value
    labels.setdefault("runtime", args.runtime)  # the server refuses images for process-runtime hosts
    settings: dict[str, object] = {
        "state_dir": args.state_dir,
        "gpu_backend": args.gpu_backend,
        "runtime": args.runtime,
        "docker_url": args.docker_url,
    }
    if args.gpu_backend == "fake":
        settings.update(gpus=args.gpus if args.gpus is not None else 8, model=args.model or "H100")
    try:
        report = join(
            server=args.server,
            join_token=os.environ.get(JOIN_TOKEN_ENV, ""),
            config_path=args.config,
            host_name=host_name,
            gpu=make_gpu_backend(args.gpu_backend, host_name, int(args.gpus or 8), str(args.model or "H100")),
            settings=settings,
            labels=labels,
        )
    except (JoinFailed, GpuUnavailable) as exc:
        print(f"join: {exc}", file=sys.stderr)
        return 1
    print(report)
    return 0


def _reading(value: float | None, unit: str) -> str:
    """A sample's reading for ``gpus``: ``-`` when the GPU could not give it (None)."""
    return "-" if value is None else f"{value:.0f}{unit}"


def _gpus(args: argparse.Namespace) -> int:
    try:
        backend = make_gpu_backend(args.gpu_backend, socket.gethostname(), args.gpus, args.model)
        inventory = backend.inventory()
        samples = {s.index: s for s in backend.sample()}
    except GpuUnavailable as exc:
        print(f"gpus: {exc}", file=sys.stderr)
        return 1
    print(f"{len(inventory)} GPU(s), backend {args.gpu_backend}")
    for g in inventory:
        s = samples.get(g.index)
        print(f"GPU {g.index} {g.uuid} {g.model} {g.memory_mb} MiB: health {s.health if s else g.health}")
        if s is not None:
            print(
                f"  util {_reading(s.utilization_pct, '%')}  mem {_reading(s.memory_used_mb, ' MiB')}  "
                f"{_reading(s.temperature_c, ' C')}  {_reading(s.power_w, ' W')}  "
                f"ecc_uncorrected {s.ecc_uncorrected}  xids {s.xids or '-'}"
            )
    backend.close()
    return 0


def _inject_fault(args: argparse.Namespace) -> int:
    try:
        faults = read_faults(args.state_dir)
    except (OSError, ValueError) as exc:
        if not (args.clear and args.gpu is None):  # --clear alone replaces any file
            print(f"inject-fault: {exc} (--clear without --gpu starts over)", file=sys.stderr)
            return 2
        faults = {}
    if args.clear:
        if args.gpu is None:
            faults.clear()
        else:
            faults.pop(args.gpu, None)
    else:
        if args.gpu is None or args.gpu < 0:
            print("inject-fault: --gpu INDEX is required", file=sys.stderr)
            return 2
        current = faults.get(args.gpu, Fault())
        fault = Fault(
            xids=sorted(set(current.xids) | set(args.xid)),
            ecc_uncorrected=current.ecc_uncorrected + args.ecc,
            degraded=current.degraded or args.degraded,
            idle=current.idle or args.idle,
            no_utilization=current.no_utilization or args.no_utilization,
        )
        # A value a heartbeat cannot carry stopped every heartbeat of the running agent (its host
        # went offline, its attempts lost): refused here, nothing written.
        problem = fault_problem(args.gpu, fault.xids, fault.ecc_uncorrected)
        if problem is not None:
            print(f"inject-fault: {problem}", file=sys.stderr)
            return 2
        faults[args.gpu] = fault
    write_faults(args.state_dir, faults)
    for index, f in sorted(faults.items()):
        print(f"GPU {index}: {f.health} xids={f.xids} ecc_uncorrected={f.ecc_uncorrected}{' idle' if f.idle else ''}")
    if not faults:
        print("no faults")
    return 0


def protect_config(path: Path) -> None:
    """The config holds the host token: make it 0600 if it is ours, else warn."""
    log = logging.getLogger("agent")
    try:
        st = path.stat()
    except OSError:
        return
    if st.st_mode & 0o077:
        if st.st_uid == os.geteuid():
            os.chmod(path, 0o600)
            log.warning("config %s was readable by others (mode %o): made it 0600", path, st.st_mode & 0o777)
        else:
            log.warning("config %s is readable by others and not ours (mode %o)", path, st.st_mode & 0o777)


def _not_dumpable() -> None:
    """No core dump of the agent (its memory holds the secrets of start messages), and its /proc
    files (environ: the token) are root's even when attempts run as the agent's own user. Children
    are dumpable again after exec."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0


def report_isolation(isolation: Isolation, state_dir: Path) -> None:
    """Log how attempts run here and write it to ``<state>/isolation.json`` (the host's state)."""
    import json

    from agent.runtime.isolation import PRIVATE_TMP, private_tmp_keep
    from agent.state import closed_parent, fix_private_modes, write_private

    log = logging.getLogger("agent")
    status = isolation.status()
    fix_private_modes(state_dir)
    closed = closed_parent(state_dir) if status["identity"] == "owner" else None
    if closed is not None:
        # Only what the private /tmp binds back is opened as the owner at the start (try59: under a 0700
        # directory of /var/lib the attempts started; their preemption notice was unreadable)
        fails = bool(private_tmp_keep([str(state_dir)], PRIVATE_TMP))
        what = (
            "every attempt run as its owner fails to start"
            if fails
            else "attempts run as their owners cannot read their preemption notice ($FAIRWAY_PREEMPT_FILE)"
        )
        status["warnings"].append(
            f"attempts cannot reach their directories under the state dir {state_dir}: {closed} is not searchable "
            f"by others, so {what}; make it searchable (chmod o+x) or put "
            "the state dir under one that is (the default /var/lib/fairway-agent)"
        )
    write_private(state_dir / "isolation.json", json.dumps(status, indent=1) + "\n")
    log.info("isolation: attempts run as %s, cgroup %s %s", status["identity"], status["cgroup"],
             status["cgroup_parent"] or status["cgroup_note"])  # fmt: skip
    for warning in status["warnings"]:
        log.warning("isolation: %s", warning)


CMDLINE_REFUSAL = (
    "agent: --token puts the host token in the agent's command line, which every process of the host reads "
    "(/proc/<pid>/cmdline, ps), its attempts included: give it in the config file (token:) or FAIRWAY_TOKEN"
)
"""Why ``run --token`` is refused (iso58; docs/isolation.md, "Environment, secrets, files")."""


def _run(args: argparse.Namespace) -> int:
    if args.token is not None:  # never shown: the refusal goes to the agent's log
        print(CMDLINE_REFUSAL, file=sys.stderr)
        return 2
    config_file = args.config or (Path(p) if (p := os.environ.get(ENV_PREFIX + "CONFIG")) else None)
    try:
        config = load_config(vars(args), config_file)
    except ConfigError as exc:
        print(f"agent: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=config.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("agent").info(
        "fairway-agent %s: host %s, %d x %s (%s), runtime %s, state %s",
        AGENT_VERSION,
        config.host_name,
        config.gpus,
        config.model,
        config.gpu_backend,
        config.runtime,
        config.state_dir,
    )
    os.umask(0o077)  # the agent's own files (records, logs, exit files) are owner-only
    _not_dumpable()
    config.state_dir.mkdir(parents=True, exist_ok=True)
    if config_file is not None:
        protect_config(config_file)
    isolation = Isolation(config.isolation)
    report_isolation(isolation, config.state_dir)
    try:
        gpu = make_gpu_backend(
            config.gpu_backend, config.host_name, config.gpus, config.model, config.gpu_memory_mb, config.state_dir
        )
        runtime = make_runtime(config, isolation, gpu.device_nodes())
    except (GpuUnavailable, RuntimeUnavailable) as exc:
        print(f"agent: {exc}", file=sys.stderr)
        return 1
    agent = Agent(config, gpu, runtime)
    try:
        asyncio.run(agent.run(install_signal_handlers=True))
    except HostRemoved:
        _note_host_removed(config.state_dir)
        return EXIT_HOST_REMOVED  # logged once by the agent; systemd's RestartPreventExitStatus
    finally:
        gpu.close()
    return 0


def _note_host_removed(state_dir: Path) -> None:
    """Leave :data:`agent.client.HOST_REMOVED_FILE` for ``--uninstall`` (try56); best effort."""
    told = told_at_text()
    try:
        (state_dir / HOST_REMOVED_FILE).write_text(f"removed from Fairway by an admin; told at {told}\n")
    except OSError as exc:
        print(f"agent: cannot write {state_dir / HOST_REMOVED_FILE}: {exc}", file=sys.stderr)


def _health(args: argparse.Namespace) -> int:
    import json

    from agent import health

    if args.state_dir:
        state_dir = Path(args.state_dir).expanduser()
    else:
        config_file = args.config or (Path(p) if (p := os.environ.get(ENV_PREFIX + "CONFIG")) else None)
        if config_file is None:
            state_dir = AgentConfig.__dataclass_fields__["state_dir"].default
        else:
            try:
                state_dir = load_config({}, config_file).state_dir
            except ConfigError as exc:
                print(f"agent: {exc}", file=sys.stderr)
                return 2
    data = health.read(state_dir)
    found = health.problems(data)
    if args.json:
        print(json.dumps({"healthy": not found, "problems": found, "health": data}, indent=1, sort_keys=True))
    else:
        print(health.describe(data))
    return 0 if not found else 1


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m agent``; returns the process exit code (2: bad usage/config)."""
    args = _parser().parse_args(argv)
    if args.command == "inject-fault":
        return _inject_fault(args)
    if args.command == "join":
        return _join(args)
    if args.command == "gpus":
        return _gpus(args)
    if args.command == "health":
        return _health(args)
    return _run(args)


if __name__ == "__main__":
    sys.exit(main())
