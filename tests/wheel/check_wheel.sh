#!/usr/bin/env bash
# The wheel path of a user's first hour: the wheel `pip wheel .` makes (argument 1,
# as tests/run.sh passes the one it built and tested; else built here), installed
# into a fresh venv (no source tree, no system site-packages), then
# tests/wheel/smoke.py run from outside the tree, with the arguments after the wheel
# (the macOS CI wheel job passes --no-model --require-metallib).
#
# usage: check_wheel.sh [WHEEL [SMOKE ARGS...]] Beyond the build, this costs about
# a minute once pip's cache holds the dependencies; it needs the default model in the
# cache (~/.cache/metalrt or $METALRT_CACHE_DIR) or the network.
set -euo pipefail
cd "$(dirname "$0")/../.."

if [ $# -ge 1 ]; then
  wheel="$(realpath "$1")"
  shift
else
  rm -rf build/wheel
  python3 -m pip wheel -q --no-deps -w build/wheel .
  wheel="$(realpath build/wheel/metalrt-*.whl)"
fi
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
python3 -m venv "$scratch/venv"
"$scratch/venv/bin/python" -m pip install -q "$wheel"
cp tests/wheel/smoke.py "$scratch/"
cd "$scratch"
PATH="$scratch/venv/bin:$PATH" "$scratch/venv/bin/python" smoke.py "$@"
