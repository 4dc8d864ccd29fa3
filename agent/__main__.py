"""Command line of the Fairway agent.

    python -m agent run --server ws://127.0.0.1:8000/ws/agent/ --token T --host-name h1 \\
        --gpus 8 --model H100 --state-dir DIR --heartbeat 5 [--config agent.yaml]
    python -m agent inject-fault --state-dir DIR --gpu 3 --xid 79 [--xid 31] [--ecc 1] [--degraded]
    python -m agent inject-fault --state-dir DIR [--gpu 3] --clear
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from pathlib import Path

from agent import AGENT_VERSION
from agent.client import Agent
from agent.config import ENV_PREFIX, ConfigError, load_config
from agent.gpu.fake import FakeGpuBackend, Fault, read_faults, write_faults
from agent.runtime.process import ProcessRuntime


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m agent", description="Fairway host agent")
    parser.add_argument("--version", action="version", version=f"fairway-agent {AGENT_VERSION}")
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="connect to the server and run attempts")
    run.add_argument("--config", type=Path, help=f"YAML config file (env {ENV_PREFIX}CONFIG)")
    run.add_argument("--server", help="websocket URL, e.g. ws://127.0.0.1:8000/ws/agent/")
    run.add_argument("--token", help="host token (prefer the config file or FAIRWAY_TOKEN)")
    run.add_argument("--host-name", dest="host_name", help="host name (default: this machine's)")
    run.add_argument("--gpus", type=int, help="number of simulated GPUs (default 8)")
    run.add_argument("--model", help="simulated GPU model (default H100)")
    run.add_argument("--gpu-memory-mb", dest="gpu_memory_mb", type=int, help="simulated GPU memory, MiB")
    run.add_argument("--state-dir", dest="state_dir", help="state directory (default /var/lib/fairway-agent)")
    run.add_argument("--heartbeat", type=float, help="heartbeat period in seconds until the server sets one")
    run.add_argument("--backoff-max", dest="backoff_max", type=float, help="longest reconnect delay, s")
    run.add_argument("--gpu-backend", dest="gpu_backend", choices=["fake"])
    run.add_argument("--runtime", choices=["process"])
    run.add_argument("--log-level", dest="log_level", choices=["DEBUG", "INFO", "WARNING", "ERROR"])

    fault = commands.add_parser("inject-fault", help="inject or clear a fault of a simulated GPU")
    fault.add_argument("--state-dir", dest="state_dir", type=Path, required=True)
    fault.add_argument("--gpu", type=int, help="GPU index (required unless --clear)")
    fault.add_argument("--xid", type=int, action="append", default=[], help="XID to report (repeatable)")
    fault.add_argument("--ecc", type=int, default=0, help="uncorrectable ECC errors (>0: unhealthy)")
    fault.add_argument("--degraded", action="store_true", help="flag the GPU degraded")
    fault.add_argument("--clear", action="store_true", help="clear the GPU's faults (all GPUs without --gpu)")
    return parser


def _inject_fault(args: argparse.Namespace) -> int:
    faults = read_faults(args.state_dir)
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
        faults[args.gpu] = Fault(
            xids=sorted(set(current.xids) | set(args.xid)),
            ecc_uncorrected=current.ecc_uncorrected + args.ecc,
            degraded=current.degraded or args.degraded,
        )
    write_faults(args.state_dir, faults)
    for index, f in sorted(faults.items()):
        print(f"GPU {index}: {f.health} xids={f.xids} ecc_uncorrected={f.ecc_uncorrected}")
    if not faults:
        print("no faults")
    return 0


def _run(args: argparse.Namespace) -> int:
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
    config.state_dir.mkdir(parents=True, exist_ok=True)
    gpu = FakeGpuBackend(
        config.host_name, config.gpus, config.model, memory_mb=config.gpu_memory_mb, state_dir=config.state_dir
    )
    agent = Agent(config, gpu, ProcessRuntime(config.state_dir))
    asyncio.run(agent.run(install_signal_handlers=True))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m agent``; returns the process exit code (2: bad usage/config)."""
    args = _parser().parse_args(argv)
    if args.command == "inject-fault":
        return _inject_fault(args)
    return _run(args)


if __name__ == "__main__":
    sys.exit(main())
