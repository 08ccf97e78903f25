#!/usr/bin/env bash
# Installs the system packages tierkit builds need, when missing: a C++17
# compiler, CMake, Ninja, GoogleTest, and venv + the C headers (Python.h) of
# the python3 in use (the bridge and torch tiers compile against them). As
# root it uses apt-get; otherwise it names the packages to install and fails.
set -euo pipefail

missing=()
# `system-deps.sh fuzz`: also clang and its libFuzzer/sanitizer runtimes (the fuzz session).
if [ "${1:-}" = fuzz ]; then
  command -v clang++ >/dev/null || missing+=(clang)
  [ -f "$(clang++ -print-file-name=libclang_rt.fuzzer-x86_64.a 2>/dev/null || echo /nonexistent)" ] ||
    missing+=(libclang-rt-14-dev)
fi
# `system-deps.sh emulation`: also Debian's aarch64 cross compiler and qemu-user
# (tests-core-aarch64, tests-core-x86-baseline: core's tests on other CPUs).
if [ "${1:-}" = emulation ]; then
  command -v aarch64-linux-gnu-g++ >/dev/null || missing+=(g++-aarch64-linux-gnu)
  { command -v qemu-aarch64 >/dev/null && command -v qemu-x86_64 >/dev/null; } || missing+=(qemu-user)
fi
command -v g++ >/dev/null || missing+=(g++)
command -v cmake >/dev/null || missing+=(cmake)
command -v ninja >/dev/null || missing+=(ninja-build)
[ -f /usr/include/gtest/gtest.h ] || missing+=(libgtest-dev)
python3 -c 'import venv, ensurepip' 2>/dev/null || missing+=(python3-venv)
# Python.h where this interpreter's build expects it (sysconfig), e.g.
# /usr/include/python3.11 for Debian's python3, <prefix>/include/... for pyenv.
py_include=$(python3 -c 'import sysconfig; print(sysconfig.get_path("include"))')
if [ ! -f "$py_include/Python.h" ]; then
  case "$(command -v python3)" in
    /usr/bin/*) missing+=(python3-dev) ;;
    *)
      echo "tierkit: $py_include/Python.h is missing: $(command -v python3) was installed without its" >&2
      echo "tierkit: C headers; reinstall that Python with them (pyenv/conda/python.org builds include them)." >&2
      exit 1
      ;;
  esac
fi

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
