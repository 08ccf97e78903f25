#!/bin/sh
# CMake's test launcher for tests-core-x86-baseline (CMAKE_CROSSCOMPILING_EMULATOR):
# runs a test binary under qemu-user on the x86-64 CPU model TIERKIT_QEMU_CPU
# (e.g. Westmere: no AVX), whose CPUID core's dispatch then reads; an
# instruction above that model's level dies with SIGILL.
exec qemu-x86_64 -cpu "${TIERKIT_QEMU_CPU:?set TIERKIT_QEMU_CPU to a qemu CPU model}" "$@"
