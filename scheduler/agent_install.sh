#!/usr/bin/env bash
# Fairway agent installer, served by the Fairway server at /agent/install.sh (DESIGN.md §5).
# `usage` below says what it does (`--help` prints it, also when the script comes from a pipe).
set -euo pipefail

SERVER_URL=@@SERVER_URL@@
WHEEL_NAME=@@WHEEL_NAME@@
AGENT_VERSION=@@AGENT_VERSION@@

TOKEN="${FAIRWAY_JOIN_TOKEN:-}"
TOKEN_FILE=""
HOST_NAME=""
GPU_BACKEND="nvml"
GPUS=""
MODEL=""
RUNTIME="process"
DOCKER_URL=""
LABELS=()
SYSTEMD=1
PREFIX=""
PYTHON="${PYTHON:-python3}"
UNINSTALL=0
PURGE=0
PRINT_UNIT=0

die() { echo "install.sh: $*" >&2; exit 1; }
say() { echo "==> $*"; }
# An option's value: there, and not the next option (`--token` last died "$2: unbound variable").
need() { [ $# -ge 2 ] && [ "${2#--}" = "$2" ] || die "$1 needs a value (see --help)"; }
usage() {
    cat <<'USAGE'
Fairway agent installer (served by the Fairway server at /agent/install.sh).

  curl -fsSL SERVER/agent/install.sh | FAIRWAY_JOIN_TOKEN=fwj_... bash -s -- [OPTIONS]    (as root)
  curl -fsSL SERVER/agent/install.sh | sudo bash -s -- --token-file FILE [OPTIONS]
  bash install.sh --token-file FILE [--server URL] [--host-name NAME] [--gpu-backend nvml|fake]
                  [--gpus N --model M] [--runtime process|docker] [--docker-url URL] [--label KEY=VALUE]...
                  [--no-systemd] [--prefix DIR] [--python PYTHON]
  bash install.sh --uninstall [--purge] [--no-systemd] [--prefix DIR]
  bash install.sh --print-unit [--runtime R] [--docker-url URL] [--prefix DIR]

Installs the agent into its own virtualenv, exchanges the single-use join token (FAIRWAY_JOIN_TOKEN
in its environment, or the first line of FILE; never an argument: every user of the host reads the
command lines of its processes) for a host token
(`fairway-agent join`), writes a config readable only by its owner and a systemd unit, then
enables and (re)starts the agent. Idempotent: run again to upgrade; an existing config is kept
(the host does not join twice). --no-systemd starts the agent in the background instead
(containers, tests); --server URL joins and connects to another address of this server (default
the one it was served from); --prefix DIR puts everything (venv, config, state, run, log) under DIR.
--uninstall stops the agent and removes the venv, config and unit; --purge also the state
directory (records and logs of attempts), the run directory and the agent's log. Attempts keep
running while the agent is stopped. The host stays registered and schedulable on the server until
it goes offline: drain it first; a machine retired for good is then removed there (admin → Hosts →
Remove from the cluster: its GPUs stop counting). pip honours PIP_INDEX_URL /
PIP_FIND_LINKS / PIP_NO_INDEX for the agent's dependencies. The unit starts after the container
engine of the runtime (the kept config's, else the options'): docker.service, or podman.socket
for a --docker-url on podman's socket; --print-unit prints it and exits, installing nothing.
USAGE
}

# iso61: `--token fwj_...` was this script's own example, and its value sat in the process list
# (/proc/PID/cmdline, ps: every local user) for the minutes the install ran; whoever joined with
# it first got a host token, and with it other people's workloads and their secrets.
token_in_argv() {
    echo "install.sh: --token puts the join token in this host's process list, where every local user reads it while the install runs: give it as FAIRWAY_JOIN_TOKEN=fwj_... in the environment (as root: curl ... | FAIRWAY_JOIN_TOKEN=fwj_... bash -s --) or in a file, --token-file FILE; revoke this one where others use this host (admin: Join tokens)" >&2
    exit 2
}

while [ $# -gt 0 ]; do
    case "$1" in
        --token|--token=*) token_in_argv ;;
        --token-file) need "$@"; TOKEN_FILE="$2"; shift 2 ;;
        --token-file=*) TOKEN_FILE="${1#*=}"; shift ;;
        --server) need "$@"; SERVER_URL="$2"; shift 2 ;;
        --host-name) need "$@"; HOST_NAME="$2"; shift 2 ;;
        --gpu-backend) need "$@"; GPU_BACKEND="$2"; shift 2 ;;
        --gpus) need "$@"; GPUS="$2"; shift 2 ;;
        --model) need "$@"; MODEL="$2"; shift 2 ;;
        --runtime) need "$@"; RUNTIME="$2"; shift 2 ;;
        --docker-url) need "$@"; DOCKER_URL="$2"; shift 2 ;;
        --label) need "$@"; LABELS+=("$2"); shift 2 ;;
        --no-systemd) SYSTEMD=0; shift ;;
        --prefix) need "$@"; PREFIX="$2"; shift 2 ;;
        --python) need "$@"; PYTHON="$2"; shift 2 ;;
        --uninstall) UNINSTALL=1; shift ;;
        --purge) PURGE=1; shift ;;
        --print-unit) PRINT_UNIT=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) die "unknown option $1 (see --help)" ;;
    esac
done

if [ -n "$TOKEN_FILE" ]; then
    [ -f "$TOKEN_FILE" ] && [ -r "$TOKEN_FILE" ] || die "cannot read the join token from $TOKEN_FILE"
    line=""
    IFS= read -r line <"$TOKEN_FILE" || true
    TOKEN="${line//[[:space:]]/}"
    [ -n "$TOKEN" ] || die "$TOKEN_FILE holds no join token"
fi

SERVER_URL="${SERVER_URL%/}"  # --server https://host/ asked //agent/… of it
if [ -n "$PREFIX" ]; then
    mkdir -p "$PREFIX"
    PREFIX="$(cd "$PREFIX" && pwd)"
    VENV="$PREFIX/venv"; ETC="$PREFIX/etc"; STATE="$PREFIX/state"; RUN="$PREFIX/run"
else
    VENV="/opt/fairway-agent/venv"; ETC="/etc/fairway-agent"; STATE="/var/lib/fairway-agent"; RUN="/run/fairway-agent"
fi
CONFIG="$ETC/agent.yaml"
UNIT_NAME="fairway-agent.service"
UNIT="/etc/systemd/system/$UNIT_NAME"
PIDFILE="$RUN/agent.pid"
LOGFILE="${PREFIX:+$PREFIX/agent.log}"
LOGFILE="${LOGFILE:-/var/log/fairway-agent.log}"

stop_background_agent() {
    [ -f "$PIDFILE" ] || return 0
    local pid
    pid="$(cat "$PIDFILE" 2>/dev/null || true)"
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && grep -q fairway-agent "/proc/$pid/cmdline" 2>/dev/null; then
        say "stopping the agent (pid $pid); its attempts keep running"
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$PIDFILE"
}

# The Requires-Dist lines of a wheel, comma-separated ("websockets==17.4, PyYAML==6.0.4, ...").
wheel_requires() {
    "$PYTHON" - "$1" <<'PY' 2>/dev/null || true
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel:
    meta = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    lines = wheel.read(meta).decode().splitlines()
print(", ".join(line.split(": ", 1)[1] for line in lines if line.startswith("Requires-Dist: ")))
PY
}

# A setting of the joined config (`fairway-agent join` writes plain `key: value` YAML), "" if none.
configured() { sed -n "s/^$1: *//p" "$CONFIG" 2>/dev/null | head -n 1 | tr -d "'\"" || true; }

# The system unit of the agent's container engine: from the kept config's runtime and docker_url
# (an upgrade keeps it), else the options'. The docker runtime reaches podman's socket, which
# systemd opens (podman.socket), or Docker's daemon (docker.service); nothing for a remote engine
# (tcp://...), a rootless podman's socket (a user unit, /run/user/UID/...), or the process runtime.
engine_unit() {
    local runtime="$RUNTIME" url="$DOCKER_URL"
    if [ -s "$CONFIG" ] && grep -q '^token:' "$CONFIG"; then
        runtime="$(configured runtime)"; url="$(configured docker_url)"
    fi
    [ "${runtime:-process}" = docker ] || return 0
    case "$url" in
        unix:///run/user/*|unix:///var/run/user/*) ;;
        unix://*podman*) echo podman.socket ;;
        ""|unix://*) echo docker.service ;;
    esac
}

agent_unit() {
    local after
    after="network-online.target${ENGINE_UNIT:+ $ENGINE_UNIT}"
    cat <<EOF
[Unit]
Description=Fairway GPU-host agent
After=$after
Wants=$after

[Service]
ExecStart=$VENV/bin/fairway-agent run --config $CONFIG
Restart=always
RestartSec=5
# 77: an admin removed this host from Fairway (the agent says so and stops): to rejoin, --uninstall, then install with a new join token and --host-name NEW.
RestartPreventExitStatus=77
# Attempts run in their own sessions and must outlive agent restarts and upgrades:
# stop only the agent process, never the attempts in its cgroup.
KillMode=process
# Each attempt gets a cgroup of its own under the agent's (docs/isolation.md): a stop kills all of it.
Delegate=yes
TimeoutStopSec=20

[Install]
WantedBy=multi-user.target
EOF
}

if [ "$PRINT_UNIT" = 1 ]; then
    ENGINE_UNIT="$(engine_unit)"
    agent_unit
    exit 0
fi

if [ "$UNINSTALL" = 1 ]; then
    if [ "$SYSTEMD" = 1 ] && [ -f "$UNIT" ]; then
        say "disabling and stopping $UNIT_NAME"
        systemctl disable --now "$UNIT_NAME" || true
        rm -f "$UNIT"
        systemctl daemon-reload || true
    fi
    stop_background_agent
    JOINED_AS="$(sed -n 's/^host_name: *//p' "$CONFIG" 2>/dev/null | head -n 1 | tr -d "'\"" || true)"
    # the note a removed host's agent leaves (agent.client.HOST_REMOVED_FILE), read before a --purge
    REMOVED_AT="$(sed -n 's/^removed from Fairway by an admin; told at //p' "$STATE/removed" 2>/dev/null | head -n 1 || true)"
    # the note of an agent whose token the server refused as unknown (agent.client.HOST_UNKNOWN_FILE):
    # a database restored from a dump older than the join has no such host (docs/deploy.md §7)
    UNKNOWN_AT="$(sed -n "s/^the server does not know this host's token; told at //p" "$STATE/unknown" 2>/dev/null | head -n 1 || true)"
    rm -rf "$VENV" "$CONFIG"
    rmdir "$ETC" "$RUN" 2>/dev/null || true
    [ -n "$PREFIX" ] || rmdir /opt/fairway-agent 2>/dev/null || true
    if [ "$PURGE" = 1 ]; then
        say "purging the state $STATE, $RUN and the log $LOGFILE"
        rm -rf "$STATE" "$RUN" "$LOGFILE"
        [ -z "$PREFIX" ] || rmdir "$PREFIX" 2>/dev/null || true
    fi
    say "uninstalled"
    if [ -n "$REMOVED_AT" ]; then
        say "the host ${JOINED_AS:-of this machine} was removed from the server by an admin (its agent was told at $REMOVED_AT): nothing is left to do there"
        exit 0
    fi
    if [ -n "$UNKNOWN_AT" ]; then
        say "the server does not know the host ${JOINED_AS:-of this machine} (it refused its token as unknown at $UNKNOWN_AT,"
        say "as after a restore of a dump older than the join): nothing to remove there; join again with a new join token"
        say "(had an admin rotated or revoked its token instead, the host is still in admin → Hosts)"
        exit 0
    fi
    say "the host ${JOINED_AS:-of this machine} is still registered on the server; unless it is drained already,"
    say "it is schedulable until it goes offline: drain it (\`fairway hosts drain ${JOINED_AS:-NAME}\` or admin → Hosts);"
    say "retired for good, remove it then"
    say "(admin → Hosts → \"Remove from the cluster\": its GPUs stop counting in every budget's entitlement)"
    exit 0
fi

[ "$SYSTEMD" = 0 ] || command -v systemctl >/dev/null || die "systemctl not found: use --no-systemd"
[ "$SYSTEMD" = 0 ] || [ "$(id -u)" = 0 ] || die "installing a systemd service needs root (or use --no-systemd --prefix DIR)"
command -v "$PYTHON" >/dev/null || die "$PYTHON not found: the agent needs Python >= 3.11"
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || die "$PYTHON is older than 3.11"
"$PYTHON" -c 'import venv, ensurepip' 2>/dev/null || die "$PYTHON lacks venv/ensurepip (Debian: apt-get install python3-venv)"
# A first install needs a join token: say so before downloading or creating anything.
{ [ -s "$CONFIG" ] && grep -q '^token:' "$CONFIG"; } || [ -n "$TOKEN" ] \
    || die "a join token is required: --token-file FILE or FAIRWAY_JOIN_TOKEN (manage.py create_join_token)"

umask 022
mkdir -p "$STATE" "$RUN" "$(dirname "$VENV")"
(umask 077; mkdir -p "$ETC")
chmod 700 "$ETC" "$STATE"

say "downloading the agent $AGENT_VERSION from $SERVER_URL"
DOWNLOAD="$(mktemp -d)"
trap 'rm -rf "$DOWNLOAD"' EXIT
"$PYTHON" - "$SERVER_URL/agent/$WHEEL_NAME" "$DOWNLOAD/$WHEEL_NAME" <<'PY'
import sys, urllib.request
url, dest = sys.argv[1], sys.argv[2]
try:
    with urllib.request.urlopen(url, timeout=60) as r, open(dest, "wb") as f:
        f.write(r.read())
except Exception as exc:
    sys.exit(f"install.sh: cannot download {url}: {exc}")
PY

if [ ! -x "$VENV/bin/python" ]; then
    say "creating the virtualenv $VENV"
    "$PYTHON" -m venv "$VENV"
fi
say "installing the agent into $VENV"
# pip's own "No matching distribution found for websockets" left an air-gapped host's operator
# without the way out (tryout36): the server serves the agent's wheel, not its dependencies.
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$DOWNLOAD/$WHEEL_NAME" \
    || die "pip could not install the agent's dependencies ($(wheel_requires "$DOWNLOAD/$WHEEL_NAME")): this host needs a package index (PIP_INDEX_URL) or a directory of their wheels (PIP_FIND_LINKS=DIR PIP_NO_INDEX=1; through sudo: sudo PIP_FIND_LINKS=DIR PIP_NO_INDEX=1 bash -s -- --token-file FILE)"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps "$DOWNLOAD/$WHEEL_NAME"

if [ -s "$CONFIG" ] && grep -q '^token:' "$CONFIG"; then
    say "keeping the existing config $CONFIG (already joined)"
else
    [ -n "$TOKEN" ] || die "a join token is required: --token-file FILE or FAIRWAY_JOIN_TOKEN (manage.py create_join_token)"
    JOIN_ARGS=(--server "$SERVER_URL" --config "$CONFIG" --state-dir "$STATE" --gpu-backend "$GPU_BACKEND" --runtime "$RUNTIME")
    [ -z "$HOST_NAME" ] || JOIN_ARGS+=(--host-name "$HOST_NAME")
    [ -z "$GPUS" ] || JOIN_ARGS+=(--gpus "$GPUS")
    [ -z "$MODEL" ] || JOIN_ARGS+=(--model "$MODEL")
    [ -z "$DOCKER_URL" ] || JOIN_ARGS+=(--docker-url "$DOCKER_URL")
    for label in "${LABELS[@]+"${LABELS[@]}"}"; do JOIN_ARGS+=(--label "$label"); done
    say "joining the cluster"
    FAIRWAY_JOIN_TOKEN="$TOKEN" "$VENV/bin/fairway-agent" join "${JOIN_ARGS[@]}"
fi
chmod 600 "$CONFIG"

if [ "$SYSTEMD" = 1 ]; then
    ENGINE_UNIT="$(engine_unit)"
    say "writing $UNIT${ENGINE_UNIT:+ (after $ENGINE_UNIT)}"
    agent_unit >"$UNIT"
    systemctl daemon-reload
    systemctl enable "$UNIT_NAME"
    systemctl restart "$UNIT_NAME"
    say "agent started: systemctl status $UNIT_NAME; journalctl -u $UNIT_NAME"
else
    stop_background_agent
    say "starting the agent in the background (log $LOGFILE)"
    setsid "$VENV/bin/fairway-agent" run --config "$CONFIG" >>"$LOGFILE" 2>&1 </dev/null &
    echo $! >"$PIDFILE"
    sleep 1
    kill -0 "$(cat "$PIDFILE")" 2>/dev/null || { tail -n 20 "$LOGFILE" >&2; die "the agent exited at once"; }
    say "agent running, pid $(cat "$PIDFILE")"
fi
