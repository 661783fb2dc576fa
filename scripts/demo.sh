#!/usr/bin/env bash
# The main demo: installs what is missing, builds, and runs a local crescent
# cluster on loopback with an embedded metadata service (nothing to start by hand).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh build
exec build/tools/crescent-demo/crescent-demo "$@"
