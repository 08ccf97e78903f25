#!/usr/bin/env bash
# Fails early, naming the folder, what is needed and what is free, when the
# disk cannot hold a run. A full disk otherwise shows up minutes in as an
# unrelated error (python3 -m venv: "ensurepip ... returned non-zero exit
# status 1", pip: "No space left on device" half-way through torch).
# A finished first run leaves about 13.5 GB in the checkout (the shared env
# with CUDA torch is 5.5 GB, the newest torch's env for tests-stable 5.4 GB,
# the oldest torch's 1 GB, builds, wheels and the Python 3.13 venv the rest);
# 16 GB is asked for, to leave room for what pip and the builds hold while
# they run. Later runs reuse the envs and need 2 GB. The on-demand
# tests-abi3-3.13 adds 5.5 GB (torch for Python 3.13). Temp space is for pip's unpacking and compiler
# scratch files.
# TIERKIT_MIN_FREE_GB overrides the checkout's figure.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -x .nox/_env/bin/python ] && [ -x .nox/_torch_next/bin/python ]; then default_gb=2; else default_gb=16; fi
need_gb="${TIERKIT_MIN_FREE_GB:-$default_gb}"
tmp="${TMPDIR:-/tmp}"

free_gb() {  # whole GB free on the filesystem holding $1
  df -Pk "$1" | awk 'NR == 2 { print int($4 / 1048576) }'
}

status=0
check() {  # folder, GB needed, why
  local have
  have=$(free_gb "$1")
  if [ "$have" -lt "$2" ]; then
    echo "tierkit: $1 has $have GB free; $3 needs at least $2 GB. Free some space and re-run." >&2
    status=1
  fi
}
check "$PWD" "$need_gb" "this run (the shared env, builds and wheels)"
check "$tmp" 1 "the temp directory (pip's unpacking, compiler scratch)"
exit "$status"
