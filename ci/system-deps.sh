#!/usr/bin/env bash
# Installs the system packages tierkit builds need, when missing: a C++17
# compiler, CMake, Ninja and GoogleTest. As root it uses apt-get; otherwise it
# names the packages to install and fails.
set -euo pipefail

missing=()
command -v g++ >/dev/null || missing+=(g++)
command -v cmake >/dev/null || missing+=(cmake)
command -v ninja >/dev/null || missing+=(ninja-build)
[ -f /usr/include/gtest/gtest.h ] || missing+=(libgtest-dev)
python3 -c 'import venv, ensurepip' 2>/dev/null || missing+=(python3-venv)

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
  echo "tierkit: missing system packages: ${missing[*]}" >&2
  echo "tierkit: install them (Debian/Ubuntu: sudo apt-get install -y ${missing[*]}) and re-run." >&2
  exit 1
fi
echo "tierkit: installing system packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq "${missing[@]}" >/dev/null
