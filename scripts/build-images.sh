#!/usr/bin/env bash
# Builds the grading runtime image that the docker sandbox backend runs learner code in.
#
#   scripts/build-images.sh                  local Debian base (no image pull), then the runtime
#   scripts/build-images.sh --base IMAGE     the runtime on IMAGE, e.g. python:3.11-slim
#   scripts/build-images.sh --force          rebuild even if the inputs are unchanged
#
# 1. The base image. Unless --base is given: a minimal Debian bookworm with Python 3.11, made
#    with debootstrap from the Debian mirror that apt already uses, then `docker import`ed as
#    loopgrade-base:bookworm. Nothing is pulled from an image registry.
# 2. The wheels. The host's pip (with its own configuration: index, find-links) downloads the
#    pinned wheels of scripts/runtime-requirements.txt into the build context; the torch wheel
#    must be the CPU build, and the script stops if anything CUDA comes along.
# 3. The runtime image, from the repo's Dockerfile with BASE_IMAGE set, built with no network.
#    It is labelled with a hash of its inputs (Dockerfile, requirements, base image id) and not
#    rebuilt while an image with that label exists.
#
# Settings: LOOPGRADE_DOCKER_IMAGE (default loopgrade-runtime:latest), PIP (default the
# project's .venv pip), DOCKER (default docker).
set -euo pipefail
cd "$(dirname "$0")/.."

RUNTIME_IMAGE=${LOOPGRADE_DOCKER_IMAGE:-loopgrade-runtime:latest}
LOCAL_BASE=loopgrade-base:bookworm
BASE_PACKAGES=python3,python3-venv
PIP=${PIP:-.venv/bin/pip}
DOCKER=${DOCKER:-docker}
CONTEXT=build/docker-context

base=""
force=""
while [ $# -gt 0 ]; do
    case "$1" in
    --base) base=$2; shift 2 ;;
    --force) force=1; shift ;;
    *) echo "usage: $0 [--base IMAGE] [--force]" >&2; exit 2 ;;
    esac
done

say() { echo "build-images: $*" >&2; }

# The first Debian mirror apt uses for the bookworm suite, from one-line or deb822 sources.
debian_mirror() {
    local found
    found=$(awk '$1 == "deb" && / bookworm / { for (i = 2; i <= NF; i++) if ($i ~ /:\/\//) { print $i; exit } }' \
        /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | head -n 1)
    if [ -z "$found" ]; then
        found=$(awk 'BEGIN { RS = ""; FS = "\n" }
            { uris = ""; bookworm = 0
              for (i = 1; i <= NF; i++) {
                  if ($i ~ /^URIs:/) { sub(/^URIs:[ \t]*/, "", $i); split($i, u, /[ \t]+/); uris = u[1] }
                  if ($i ~ /^Suites:/ && $i ~ /[ \t]bookworm([ \t]|$)/) bookworm = 1
              }
              if (bookworm && uris != "") { print uris; exit } }' \
            /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n 1)
    fi
    [ -n "$found" ] || { say "no Debian bookworm mirror in /etc/apt/sources.list*"; exit 1; }
    echo "$found"
}

build_local_base() {
    local wanted
    wanted=$(echo "bookworm minbase $BASE_PACKAGES" | sha256sum | cut -d' ' -f1)
    if [ -z "$force" ] &&
        [ "$($DOCKER image inspect -f '{{index .Config.Labels "loopgrade.inputs"}}' "$LOCAL_BASE" 2>/dev/null)" = "$wanted" ]; then
        say "$LOCAL_BASE is up to date"
        return
    fi
    command -v debootstrap >/dev/null || { say "debootstrap is missing: apt-get install debootstrap"; exit 1; }
    local mirror rootfs
    mirror=$(debian_mirror)
    rootfs=$(mktemp -d /var/tmp/loopgrade-rootfs.XXXXXX)
    trap 'rm -rf "$rootfs"' EXIT
    say "debootstrap bookworm ($BASE_PACKAGES) from $mirror"
    debootstrap --variant=minbase --include="$BASE_PACKAGES" bookworm "$rootfs" "$mirror" >"$rootfs.log" 2>&1 ||
        { tail -n 20 "$rootfs.log" >&2; exit 1; }
    rm -f "$rootfs.log"
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/log/*.log
    tar -C "$rootfs" --numeric-owner -c . |
        $DOCKER import \
            --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
            --change 'ENV LANG=C.UTF-8' \
            --change "LABEL loopgrade.inputs=$wanted" \
            --change 'CMD ["python3"]' \
            - "$LOCAL_BASE" >/dev/null
    rm -rf "$rootfs"
    trap - EXIT
    say "built $LOCAL_BASE"
}

fetch_wheels() {
    rm -rf "$CONTEXT"
    mkdir -p "$CONTEXT/wheels"
    cp scripts/runtime-requirements.txt "$CONTEXT/"
    say "downloading the pinned wheels with $PIP"
    "$PIP" download -q --only-binary=:all: --no-deps -d "$CONTEXT/wheels" \
        -r scripts/runtime-requirements.txt
    # The pins list every dependency; anything CUDA would mean pip found the wrong torch build.
    if ls "$CONTEXT/wheels" | grep -q -i -E '^nvidia|^triton'; then
        say "pip fetched CUDA wheels: point pip at the CPU build of torch (see docs/security.md)"
        exit 1
    fi
    ls "$CONTEXT/wheels" | grep -q -E '^torch-2\.13\.0\+cpu-' ||
        { say "the torch wheel is not the 2.13.0 CPU build: $(ls "$CONTEXT/wheels" | grep '^torch-')"; exit 1; }
}

if [ -z "$base" ]; then
    build_local_base
    base=$LOCAL_BASE
fi
base_id=$($DOCKER image inspect -f '{{.Id}}' "$base" 2>/dev/null) ||
    { say "base image $base is not here (pull it, or omit --base to build a local one)"; exit 1; }
inputs=$(cat Dockerfile scripts/runtime-requirements.txt <(echo "$base_id") | sha256sum | cut -d' ' -f1)
if [ -z "$force" ] &&
    [ "$($DOCKER image inspect -f '{{index .Config.Labels "loopgrade.inputs"}}' "$RUNTIME_IMAGE" 2>/dev/null)" = "$inputs" ]; then
    say "$RUNTIME_IMAGE is up to date (inputs $inputs)"
    exit 0
fi
fetch_wheels
say "building $RUNTIME_IMAGE on $base"
started=$(date +%s)
$DOCKER build -q --network none --build-arg "BASE_IMAGE=$base" --label "loopgrade.inputs=$inputs" \
    --target runtime -f Dockerfile -t "$RUNTIME_IMAGE" "$CONTEXT" >/dev/null
rm -rf "$CONTEXT"
say "built $RUNTIME_IMAGE in $(($(date +%s) - started)) s"
# The build stage and the images this one replaced, now untagged: 1-2 GB each.
$DOCKER image prune -f --filter label=loopgrade.stage >/dev/null
$DOCKER image prune -f --filter label=loopgrade.inputs >/dev/null
