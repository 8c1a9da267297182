#!/usr/bin/env bash
# Installs metalrt with its test dependencies, builds the doctest gates, runs every
# gate. Exits non-zero on any failure. This is the README's test command; CI runs it.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
for pkg in doctest-dev clang; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
if [ ${#need_apt[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}"
fi

# The Objective-C++ Metal device builds only on a Mac: type-check it with clang and
# check its selectors against metal-cpp here.
# pip prepares the metal-cpp sdist's metadata with these (its build backend, and ours).
python3 -m pip install -q scikit-build-core nanobind
python3 tests/objc/check_objc.py

python3 -m pip install -q --upgrade pip >/dev/null
python3 -m pip install -q ".[test]"

cmake -S . -B build/tests -G Ninja -DMETALRT_BUILD_TESTS=ON -DMETALRT_BUILD_PYTHON=OFF >/dev/null
cmake --build build/tests
./build/tests/metalrt_tests

# Run pytest outside the source tree so the installed package is the one tested.
cd tests/python
python3 -m pytest -q -p no:cacheprovider .
