#!/usr/bin/env bash
# The main demo: installs what is missing, builds, and runs a local crescent
# cluster on loopback with an embedded metadata service (nothing to start by hand).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
# Configured like scripts/build.sh, but builds only the demo and the daemons
# it starts (tools/crescent-demo's add_dependencies), not every test.
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >build.cmake.log 2>&1 || { cat build.cmake.log; exit 1; }
cmake --build build -j"$(nproc)" --target crescent-demo
exec build/tools/crescent-demo/crescent-demo "$@"
