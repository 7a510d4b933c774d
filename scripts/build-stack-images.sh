#!/usr/bin/env bash
# Builds the images of docker-compose.yml on the local Debian base (no image is pulled):
#   loopgrade-app:latest       deploy/app.Dockerfile: the api and the worker
#                              (loopgrade-app:build, its build stage, is kept as the cache)
#   loopgrade-postgres:15      deploy/postgres.Dockerfile: Debian's postgresql-15
#   loopgrade-redis:7          deploy/redis.Dockerfile: Debian's redis-server
#
#   scripts/build-stack-images.sh
#
# The base comes from scripts/build-images.sh (debootstrap). The app's wheels are downloaded
# here with the host's pip (its own index configuration, the torch CPU build), so the app's
# build stage installs with no index. The runtime stages install Debian packages with apt, the
# ordinary client, so those builds use the host's network (--network host).
set -euo pipefail
cd "$(dirname "$0")/.."

PIP=${PIP:-.venv/bin/pip}
DOCKER=${DOCKER:-docker}
BASE=loopgrade-base:bookworm
CONTEXT=build/stack-context
say() { echo "build-stack-images: $*" >&2; }

scripts/build-images.sh

rm -rf "$CONTEXT"
mkdir -p "$CONTEXT/wheels" "$CONTEXT/src"
# The runtime dependencies of pyproject.toml, as pip reads them.
python3 - >"$CONTEXT/requirements.txt" <<'PY'
import tomllib
with open("pyproject.toml", "rb") as f:
    print("\n".join(tomllib.load(f)["project"]["dependencies"]))
PY
# redis-py needs async-timeout below Python 3.11.3 (Debian's is 3.11.2); pip evaluates that
# marker for the host's own Python, so it is named here.
echo 'async-timeout>=4.0.3' >>"$CONTEXT/requirements.txt"
# For the base's Python (Debian's 3.11.2), not the host's: markers such as
# python_full_version < "3.11.3" must come out as they will in the image.
base_python=$($DOCKER run --rm --network none "$BASE" python3 -c 'import platform; print(platform.python_version())')
say "downloading the app's wheels for Python $base_python with $PIP"
"$PIP" download -q --only-binary=:all: --python-version "$base_python" -d "$CONTEXT/wheels" \
    -r "$CONTEXT/requirements.txt"
if ls "$CONTEXT/wheels" | grep -q -i -E '^nvidia|^triton'; then
    say "pip fetched CUDA wheels: point pip at the CPU build of torch"; exit 1
fi
cp -r app graders sandbox exercises migrations "$CONTEXT/src/"
find "$CONTEXT/src" -name __pycache__ -prune -exec rm -rf {} +

image_id() { $DOCKER image inspect --format '{{.Id}}' "$1" 2>/dev/null || true; }
replaced=("$(image_id loopgrade-app:build)" "$(image_id loopgrade-app:latest)")
started=$(date +%s)
# The build stage is tagged so that it stays as the cache of the next build: while the wheels
# are unchanged the venv (1 GB, most of it torch) is neither installed nor copied again.
$DOCKER build -q --network host --build-arg "BASE_IMAGE=$BASE" --target build \
    -f deploy/app.Dockerfile -t loopgrade-app:build "$CONTEXT" >/dev/null
$DOCKER build -q --network host --build-arg "BASE_IMAGE=$BASE" --target runtime \
    -f deploy/app.Dockerfile -t loopgrade-app:latest "$CONTEXT" >/dev/null
say "built loopgrade-app:latest in $(($(date +%s) - started)) s"
# What the new build replaced, unless a container still uses it.
for old in "${replaced[@]}"; do
    if [ -n "$old" ] && [ "$old" != "$(image_id loopgrade-app:build)" ] &&
        [ "$old" != "$(image_id loopgrade-app:latest)" ]; then
        $DOCKER image rm "$old" >/dev/null 2>&1 || true
    fi
done
rm -rf "$CONTEXT"
$DOCKER build -q --network host --build-arg "BASE_IMAGE=$BASE" \
    -f deploy/postgres.Dockerfile -t loopgrade-postgres:15 deploy >/dev/null
$DOCKER build -q --network host --build-arg "BASE_IMAGE=$BASE" \
    -f deploy/redis.Dockerfile -t loopgrade-redis:7 deploy >/dev/null
$DOCKER image prune -f --filter label=loopgrade.stage >/dev/null
say "built loopgrade-postgres:15 and loopgrade-redis:7"
$DOCKER image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep -E '^loopgrade-(app|postgres|redis):' >&2
