#!/usr/bin/env bash
# The macOS CI jobs' toolchain check (.github/workflows/ci.yml): prints Xcode's and the
# SDK's versions, refuses an SDK older than macOS 15, and probe-compiles a one-line
# kernel with the build's flags (.ci/metal_flags.cmake) and links it with `metallib`.
# Locating `metal` is not enough: Xcode 26 without its Metal Toolchain component keeps
# a stub that `xcrun -f metal` finds and that fails when run.
#
# Writes metal=true or metal=false to $GITHUB_OUTPUT (when set).
# usage: metal_toolchain.sh [--require]   (--require: exit 1 when the probe fails)
set -euo pipefail
cd "$(dirname "$0")/.."
require=false
[ "${1:-}" = "--require" ] && require=true

xcodebuild -version || true   # informational: a CLT-only machine has no xcodebuild
sdk="$(xcrun --show-sdk-version)"
echo "macOS SDK ${sdk}"
# The job tests the macOS 15 SDK build of the Objective-C++ device (MTLMathMode,
# setMathFloatingPointFunctions:); an older default Xcode would test the SDK-14 branch.
if [ "${sdk%%.*}" -lt 15 ]; then
  echo "::error::[metal toolchain] the macOS SDK is ${sdk}; this job needs the macOS 15 SDK or later (Xcode 16+)"
  exit 1
fi

flags_line="$(cmake -P .ci/metal_flags.cmake)"   # an assignment: a cmake error stops here
read -r -a flags <<< "$flags_line"
probe="$(mktemp -d)"
trap 'rm -rf "$probe"' EXIT
echo 'kernel void metalrt_probe(device float* x [[buffer(0)]]) { x[0] = 1.0f; }' > "$probe/probe.metal"
if xcrun -sdk macosx metal "${flags[@]}" -c "$probe/probe.metal" -o "$probe/probe.air" &&
   xcrun -sdk macosx metallib "$probe/probe.air" -o "$probe/probe.metallib"; then
  xcrun -sdk macosx metal --version
  result=true
else
  result=false
  echo "::warning::[metal toolchain] Apple's Metal compiler does not compile a one-line kernel" \
       "(on Xcode 26: xcodebuild -downloadComponent MetalToolchain); the kernels are not compiled by it here"
fi
if [ -n "${GITHUB_OUTPUT:-}" ]; then echo "metal=${result}" >> "$GITHUB_OUTPUT"; fi
if [ "$result" = false ] && [ "$require" = true ]; then
  echo "::error::[metal toolchain] this job needs Apple's Metal compiler"
  exit 1
fi
