#!/usr/bin/env bash
# `make image`: the Fairway server image, with podman, from Debian packages only (no registry).
#   1. base: a minimal Debian rootfs (python3, venv, CA certificates, tzdata) built by mmdebstrap
#      into var/image/base.tar, imported as localhost/fairway-base:bookworm. Cached: made only when
#      podman has no such image and the tar is missing; REFRESH_BASE=1 makes it anew.
#   2. image: `podman build` of the Containerfile on that base → localhost/fairway:<version>
#      and localhost/fairway:latest.
# The docker image format keeps the HEALTHCHECK (OCI has none).
# Environment: IMAGE (localhost/fairway), BASE_IMAGE, SUITE (bookworm), MIRROR, PODMAN_RUNTIME,
# BUILD_CA_BUNDLE (CA certificates pip trusts during the build; default $PIP_CERT or the host's),
# (runc where crun is missing), PODMAN (podman). Needs root (rootful podman) or a working rootless setup.
set -euo pipefail
cd "$(dirname "$0")/.."

PODMAN=${PODMAN:-podman}
SUITE=${SUITE:-bookworm}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
SECURITY=${SECURITY:-http://deb.debian.org/debian-security}
BASE_IMAGE=${BASE_IMAGE:-localhost/fairway-base:$SUITE}
IMAGE=${IMAGE:-localhost/fairway}
CACHE=var/image
VERSION=$(sed -n 's/^version = "\([^"]*\)".*/\1/p' pyproject.toml)
runtime=()
if [ -n "${PODMAN_RUNTIME:-}" ]; then
    runtime=(--runtime "$PODMAN_RUNTIME")
elif ! command -v crun >/dev/null && command -v runc >/dev/null; then
    runtime=(--runtime runc)
fi

for tool in "$PODMAN" mmdebstrap; do
    command -v "$tool" >/dev/null || { echo "make image: $tool is not installed (apt-get install podman mmdebstrap)" >&2; exit 2; }
done

mkdir -p "$CACHE"
if [ -n "${REFRESH_BASE:-}" ]; then  # REFRESH_BASE=1 make image: newer Debian packages
    rm -f "$CACHE/base.tar"
    "$PODMAN" rmi -f "$BASE_IMAGE" >/dev/null 2>&1 || true
fi
if ! "$PODMAN" image exists "$BASE_IMAGE"; then
    if [ ! -s "$CACHE/base.tar" ]; then
        echo "make image: building the Debian $SUITE base with mmdebstrap (a few minutes, once)"
        mmdebstrap --quiet --variant=minbase --format=tar \
            --include=python3,python3-venv,ca-certificates,tzdata \
            --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
            --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/locale/locale.alias' \
            --dpkgopt='path-exclude=/usr/share/info/*' \
            --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
            "$SUITE" "$CACHE/base.tar.part" \
            "deb $MIRROR $SUITE main" "deb $MIRROR $SUITE-updates main" "deb $SECURITY $SUITE-security main"
        mv "$CACHE/base.tar.part" "$CACHE/base.tar"
    fi
    echo "make image: importing $CACHE/base.tar as $BASE_IMAGE"
    "$PODMAN" import --quiet "$CACHE/base.tar" "$BASE_IMAGE" >/dev/null
fi

# pip in the build stage trusts the CA bundle pip trusts here (a TLS-inspecting proxy's CA), mounted
# for the build only: the image keeps Debian's certificates.
ca=${BUILD_CA_BUNDLE:-${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}}
cert=()
if [ -s "$ca" ]; then
    cert=(--volume "$(readlink -f "$ca"):/run/build-ca.crt:ro" --build-arg PIP_CERT=/run/build-ca.crt)
fi

echo "make image: podman build → $IMAGE:$VERSION"
"$PODMAN" build "${runtime[@]}" --format docker --network host --pull=never --build-arg "BASE=$BASE_IMAGE" "${cert[@]}" \
    -f Containerfile -t "$IMAGE:$VERSION" -t "$IMAGE:latest" .
"$PODMAN" image inspect "$IMAGE:$VERSION" --format "make image: $IMAGE:$VERSION, {{.Size}} bytes"
