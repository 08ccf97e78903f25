"""What noxfile.py's sessions are made of: the tier table (tiers.py), the
shared environment (env.py), the CMake/CTest driver (ctest.py) and the
sanitizer harness (sanitizers.py). Plain modules, imported by the noxfile."""
