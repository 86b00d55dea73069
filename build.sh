#!/usr/bin/env bash
# One-command set-up.
#   ./build.sh          create .venv, install dependencies, build (editable), run the demo
#   ./build.sh test     the same set-up, then the test suite (extra args go to pytest)
#   ./build.sh asan     the same set-up, then an ASan+UBSan build of the runtime (build/asan) and the sanitizer fuzz
#                       job on it (extra args go to tests/fuzz/sanitizer_fuzz.py, e.g. --ms 10000 --onnx 1000)
#   ./build.sh arm64    the same set-up, then an ARM64 cross build (build/arm64: Debian's g++-aarch64-linux-gnu, which
#                       it installs with qemu-user when missing) and the emulated test job on it under qemu-user's CPU
#                       models (extra args go to tests/arm64/run.py, e.g. --long or --cpus max)
#   ./build.sh setup    the set-up alone;  ./build.sh asan-build  the dependencies and the sanitizer build alone;
#   ./build.sh arm64-build  the dependencies, the Debian packages and the ARM64 cross build alone
set -euo pipefail
cd "$(dirname "$0")"

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
# shellcheck disable=SC1091
. .venv/bin/activate

# Dependencies: reinstalled only when requirements-dev.txt or requirements-nodeps.txt changes.
stamp=.venv/.requirements.sha
want=$(cat requirements-dev.txt requirements-nodeps.txt | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  python -m pip install -q --upgrade pip
  python -m pip install -q -r requirements-dev.txt
  python -m pip install -q --no-deps -r requirements-nodeps.txt
  echo "$want" > "$stamp"
fi

# Build the C++ core and the Python extension; CMake rebuilds only what changed. (Not for asan-build or arm64-build:
# CI runs them beside the tests, and reinstalling the package would pull the extension from under them.)
# A stamp of the native sources skips the reinstall when nothing native changed (Python files are served from the
# source tree by the editable install).
native=$(find lite/src lite/include lite/schema cmake CMakeLists.txt pyproject.toml -type f | LC_ALL=C sort \
         | xargs cat | sha256sum | cut -d' ' -f1)
if [ "${1:-demo}" != asan-build ] && [ "${1:-demo}" != arm64-build ] \
   && { [ ! -f .venv/.native.sha ] || [ "$(cat .venv/.native.sha)" != "$native" ] \
        || ! python -c "import lite._lite" 2>/dev/null; }; then
  python -m pip install -q --no-build-isolation --no-deps -e .
  echo "$native" > .venv/.native.sha
fi

build_asan() {
  mkdir -p build
  cmake -S . -B build/asan -G Ninja -DCMAKE_BUILD_TYPE=Release -DLITE_SANITIZE=ON -DLITE_OPT=-O0 \
    -DPython_EXECUTABLE="$(command -v python)" > build/asan.configure.log
  cmake --build build/asan --target fuzz_load
}

# Debian packages (ARM64 mode only: the main build needs none): each "package:command" installed when the command is
# missing, with sudo -n when not root; the package lists are refreshed only when the install fails without.
ensure_debs() {
  local missing=() spec sudo=()
  for spec in "$@"; do
    command -v "${spec#*:}" > /dev/null 2>&1 || missing+=("${spec%%:*}")
  done
  [ "${#missing[@]}" -eq 0 ] && return 0
  [ "$(id -u)" -eq 0 ] || sudo=(sudo -n)
  echo "[build.sh] installing ${missing[*]} (apt-get)" >&2
  export DEBIAN_FRONTEND=noninteractive
  if ! "${sudo[@]}" apt-get install -y -q "${missing[@]}"; then
    "${sudo[@]}" apt-get update -q
    "${sudo[@]}" apt-get install -y -q "${missing[@]}"
  fi
}

# The ARM64 cross build (cmake/toolchains/aarch64-linux-gnu.cmake): the runtime, benchmark_lite, libmslite.so and the
# native kernel tests, without the Python extension.
build_arm64() {
  ensure_debs g++-aarch64-linux-gnu:aarch64-linux-gnu-g++ qemu-user:qemu-aarch64
  mkdir -p build
  if [ ! -f build/arm64/build.ninja ]; then   # configured once; the build re-runs CMake when CMakeLists.txt changes
    cmake -S . -B build/arm64 -G Ninja -DCMAKE_TOOLCHAIN_FILE=cmake/toolchains/aarch64-linux-gnu.cmake \
      -DCMAKE_BUILD_TYPE=Release -DLITE_OPT=-O3 -DPython_EXECUTABLE="$(command -v python)" > build/arm64.configure.log
  fi
  cmake --build build/arm64
}

case "${1:-demo}" in
  setup)
    ;;
  asan-build)
    build_asan
    ;;
  demo)
    python examples/demo.py
    ;;
  test)
    shift || true
    python -m pytest -q "$@"
    ;;
  asan)
    shift || true
    build_asan
    python -m tests.fuzz.sanitizer_fuzz --driver build/asan/fuzz_load "$@"
    ;;
  arm64-build)
    build_arm64
    ;;
  arm64)
    shift || true
    build_arm64
    python -m tests.arm64.run --build build/arm64 "$@"
    ;;
  *)
    echo "usage: ./build.sh [demo|setup|test [pytest args]|asan [fuzz args]|asan-build|arm64 [run args]|arm64-build]" \
      >&2
    exit 2
    ;;
esac
