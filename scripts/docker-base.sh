#!/usr/bin/env bash
# Makes the Debian base image that the container tests build the image on,
# where no registry can be reached: a minimal bookworm root filesystem (with
# CA certificates) made by debootstrap from Debian's mirror and imported
# with `docker import`. Does nothing if the image exists.
#
#   scripts/docker-base.sh [IMAGE]     (default zt-test/debian:bookworm)
#
# ZT_DEBIAN_MIRROR overrides the mirror (default http://deb.debian.org/debian).
set -euo pipefail
image="${1:-zt-test/debian:bookworm}"
mirror="${ZT_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
if docker image inspect "$image" >/dev/null 2>&1; then
    exit 0
fi
if ! command -v debootstrap >/dev/null; then
    sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
    $sudo apt-get install -y -q debootstrap >/dev/null
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
if ! debootstrap --variant=minbase --include=ca-certificates bookworm \
    "$work/root" "$mirror" >"$work/log" 2>&1; then
    tail -20 "$work/log" >&2
    echo "debootstrap of bookworm from $mirror failed" >&2
    exit 1
fi
tar -C "$work/root" -c . | docker import - "$image" >/dev/null
echo "made $image from $mirror"
