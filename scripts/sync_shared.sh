#!/usr/bin/env bash
# Re-copy new or changed files from the shared folder into this checkout:
#   ../shared/scenarios/*      -> tests/scenarios/
#   ../shared/traces/philly/*  -> data/philly/   (the CSV is checked against its published sha256)
# Idempotent: a file whose content is already identical is left alone. Prints what it changed.
# Usage: scripts/sync_shared.sh [SHARED_DIR]   (default: ../shared next to the repository root)
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
shared=${1:-"$top/../shared"}
philly_sha256=df85cd1e0c5c7b082d440d8bbf9904542f58593ee78e9b0816319a88e692c0c3

if [ ! -d "$shared" ]; then
  echo "sync_shared: no shared folder at $shared" >&2
  exit 1
fi

changed=0

# sync_dir SRC DST: copy each regular file of SRC into DST when missing or different.
sync_dir() {
  local src=$1 dst=$2 f name
  [ -d "$src" ] || return 0
  mkdir -p "$dst"
  for f in "$src"/*; do
    [ -f "$f" ] || continue
    name=$(basename "$f")
    # The trace README is kept as data/philly/README.md (ours, with the attribution), never overwritten.
    if [ -f "$dst/$name" ] && cmp -s "$f" "$dst/$name"; then
      continue
    fi
    if [ "$name" = philly_jobs.csv ]; then
      got=$(sha256sum "$f" | cut -d' ' -f1)
      if [ "$got" != "$philly_sha256" ]; then
        echo "sync_shared: $f has sha256 $got, expected $philly_sha256; not copied" >&2
        exit 2
      fi
    fi
    cp "$f" "$dst/$name.tmp.$$"
    chmod u+w,go+r "$dst/$name.tmp.$$"
    mv "$dst/$name.tmp.$$" "$dst/$name"
    echo "sync_shared: updated $dst/$name"
    changed=$((changed + 1))
  done
}

sync_dir "$shared/scenarios" "$top/tests/scenarios"
sync_dir "$shared/traces/philly" "$top/data/philly"

# Whatever was copied, the CSV in the checkout must match the published digest.
if [ -f "$top/data/philly/philly_jobs.csv" ]; then
  got=$(sha256sum "$top/data/philly/philly_jobs.csv" | cut -d' ' -f1)
  if [ "$got" != "$philly_sha256" ]; then
    echo "sync_shared: data/philly/philly_jobs.csv has sha256 $got, expected $philly_sha256" >&2
    exit 2
  fi
fi

echo "sync_shared: $changed file(s) updated"
