#!/usr/bin/env bash
# Rebuild app/web/static/editor.js, the committed editor bundle, from frontend/:
#
#   scripts/build-editor.sh           npm ci (exactly the versions of package-lock.json), build
#   scripts/build-editor.sh --check   the same, then fail if the committed bundle differs
#
# Serving needs none of this (the bundle is committed); run it after changing frontend/src or
# the packages (npm install PKG@VERSION in frontend/, which rewrites the lock), then commit the
# bundle with them. Needs Node.js 20 and npm.
set -euo pipefail
cd "$(dirname "$0")/../frontend"
npm ci --no-audit --no-fund --ignore-scripts
node build.mjs "$@"
