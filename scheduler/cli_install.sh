#!/usr/bin/env bash
# Fairway CLI installer, served by the Fairway server at /cli/install.sh.
# `usage` below says what it does (`--help` prints it, also when the script comes from a pipe).
set -euo pipefail

SERVER_URL=@@SERVER_URL@@
WHEEL_NAME=@@WHEEL_NAME@@
CLI_VERSION=@@CLI_VERSION@@

PREFIX="${XDG_DATA_HOME:-$HOME/.local/share}/fairway-cli"
BIN_DIR="$HOME/.local/bin"
PYTHON="${PYTHON:-python3}"
UNINSTALL=0

die() { echo "install.sh: $*" >&2; exit 1; }
say() { echo "==> $*"; }
# An option's value: there, and not the next option (`--token` last died "$2: unbound variable").
need() { [ $# -ge 2 ] && [ "${2#--}" = "$2" ] || die "$1 needs a value (see --help)"; }
usage() {
    cat <<'USAGE'
Fairway CLI installer (served by the Fairway server at /cli/install.sh).

  curl -fsSL SERVER/cli/install.sh | bash [-s -- OPTIONS]
  bash install.sh [--prefix DIR] [--bin-dir DIR] [--python PYTHON] [--server URL]
  bash install.sh --uninstall [--prefix DIR] [--bin-dir DIR]

Installs `fairway` (the researchers' command line, pure Python plus `requests` and PyYAML) into its own
virtualenv, DIR/venv (default ~/.local/share/fairway-cli), and links DIR/venv/bin/fairway into
the bin directory (default ~/.local/bin). No root needed. Run again to upgrade to this server's
version. pip honours PIP_INDEX_URL / PIP_FIND_LINKS / PIP_NO_INDEX for those two.
Saves the server as the CLI's default in its config (~/.config/fairway/config.json, or
$FAIRWAY_CONFIG) unless the config names a server already.
USAGE
}

while [ $# -gt 0 ]; do
    case "$1" in
        --prefix) need "$@"; PREFIX="$2"; shift 2 ;;
        --bin-dir) need "$@"; BIN_DIR="$2"; shift 2 ;;
        --python) need "$@"; PYTHON="$2"; shift 2 ;;
        --server) need "$@"; SERVER_URL="$2"; shift 2 ;;
        --uninstall) UNINSTALL=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) die "unknown option $1 (see --help)" ;;
    esac
done

# The site's root, as `fairway login --server` takes it: `https://host/` or `https://host/api/v1`
# (README's "REST API at /api/v1/") asked HTTP 404 of /api/v1/cli/… in a traceback (tryout36).
SERVER_URL="${SERVER_URL%/}"; SERVER_URL="${SERVER_URL%/api/v1}"
VENV="$PREFIX/venv"
if [ "$UNINSTALL" = 1 ]; then
    rm -rf "$VENV"
    [ -L "$BIN_DIR/fairway" ] && rm -f "$BIN_DIR/fairway"
    say "fairway removed (your ~/.config/fairway stays)"
    exit 0
fi

command -v "$PYTHON" >/dev/null || die "$PYTHON not found (Python 3.11 or newer; --python PYTHON)"
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || die "$PYTHON is older than 3.11"
"$PYTHON" -c 'import venv, ensurepip' 2>/dev/null || die "$PYTHON lacks venv/ensurepip (Debian: apt-get install python3-venv)"

say "fairway $CLI_VERSION from $SERVER_URL into $VENV"
mkdir -p "$PREFIX" "$BIN_DIR"
DOWNLOAD="$(mktemp -d)"
trap 'rm -rf "$DOWNLOAD"' EXIT
# An unreachable server was a urllib traceback (tryout36): one line, naming the URL.
"$PYTHON" - "$SERVER_URL/cli/$WHEEL_NAME" "$DOWNLOAD/$WHEEL_NAME" <<'PY'
import shutil, sys, urllib.request
try:
    with urllib.request.urlopen(sys.argv[1], timeout=60) as answer, open(sys.argv[2], "wb") as out:  # noqa: S310
        shutil.copyfileobj(answer, out)
except Exception as exc:
    sys.exit(f"install.sh: cannot download {sys.argv[1]}: {exc} (is the Fairway server there? --server URL)")
PY
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$DOWNLOAD/$WHEEL_NAME" \
    || die "pip could not install fairway's dependencies (requests, PyYAML): this machine needs a package index (PIP_INDEX_URL) or a directory of wheels (PIP_FIND_LINKS=DIR PIP_NO_INDEX=1)"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps "$DOWNLOAD/$WHEEL_NAME"
ln -sf "$VENV/bin/fairway" "$BIN_DIR/fairway"
say "installed: $("$BIN_DIR/fairway" --version)"
case ":$PATH:" in *":$BIN_DIR:"*) ;; *) say "add $BIN_DIR to your PATH" ;; esac
# This server as the CLI's default (its config, ~/.config/fairway/config.json), unless the config
# names one already (tryout45: nothing was saved, so `fairway login -u X` asked 127.0.0.1:8000).
if ADOPTED="$("$VENV/bin/python" -c '
import sys
from fairway_cli.cli import adopt_server
saved, text = adopt_server(sys.argv[1])
print(text)
sys.exit(0 if saved else 3)
' "$SERVER_URL")"; then
    say "$ADOPTED"
    say "next: fairway login"
else
    say "$ADOPTED"
    say "next: fairway --server $SERVER_URL login"
fi
