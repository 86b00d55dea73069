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
#   ./build.sh arm64-build  the dependencies, the Debian packages and the ARM64 cross build alone (with the Python
#                       extension, built against Debian's arm64 Python packages unpacked in build/arm64-python)
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

# The target's Python for the ARM64 build: Debian's arm64 packages of this venv's Python version and of numpy, unpacked
# into build/arm64-python (not installed: dpkg would swap the machine's own python3 for the arm64 one). Its headers
# build the extension; its interpreter runs it under qemu (tests/arm64/python_check.py). Package names are Debian 12's;
# where they cannot be had (another release, no arm64 lists) the cross build goes on without the extension.
arm64_python_root() {
  local root=build/arm64-python v debs sudo=()
  v=$(python -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  [ -f "$root/.complete-$v" ] && return 0
  [ "$(id -u)" -eq 0 ] || sudo=(sudo -n)
  debs=(gcc-12-base libgcc-s1 libstdc++6 libc6 libssl3 zlib1g libexpat1 liblzma5 libbz2-1.0 libcrypt1 libffi8 libuuid1
        libsqlite3-0 libtinfo6 libncursesw6 libreadline8 libblas3 liblapack3 libgfortran5 "python$v-minimal"
        "libpython$v-minimal" "libpython$v-stdlib" "python$v" "libpython$v" "libpython$v-dev" python3-numpy)
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    "${sudo[@]}" dpkg --add-architecture arm64 && "${sudo[@]}" apt-get update -q > /dev/null || true
  fi
  rm -rf "$root" && mkdir -p "$root/debs"
  if ! (cd "$root/debs" && apt-get download -q "${debs[@]/%/:arm64}" > /dev/null 2>&1); then
    echo "[build.sh] no Debian arm64 packages of Python $v and numpy: the ARM64 build goes without the extension" >&2
    rm -rf "$root"
    return 0
  fi
  for deb in "$root"/debs/*.deb; do dpkg-deb -x "$deb" "$root/root"; done
  rm -rf "$root/debs"
  # The BLAS / LAPACK links numpy loads are made by update-alternatives on installation.
  ln -sf blas/libblas.so.3 "$root/root/usr/lib/aarch64-linux-gnu/libblas.so.3"
  ln -sf lapack/liblapack.so.3 "$root/root/usr/lib/aarch64-linux-gnu/liblapack.so.3"
  touch "$root/.complete-$v"
}

# The ARM64 cross build (cmake/toolchains/aarch64-linux-gnu.cmake): the runtime, benchmark_lite, libmslite.so, the
# native kernel tests and, with the target's Python at hand, the Python extension.
build_arm64() {
  ensure_debs g++-aarch64-linux-gnu:aarch64-linux-gnu-g++ qemu-user:qemu-aarch64
  mkdir -p build
  arm64_python_root
  local python_root=""
  [ -d build/arm64-python/root ] && python_root="$PWD/build/arm64-python/root"
  cmake -S . -B build/arm64 -G Ninja -DCMAKE_TOOLCHAIN_FILE=cmake/toolchains/aarch64-linux-gnu.cmake \
    -DCMAKE_BUILD_TYPE=Release -DLITE_OPT=-O3 -DPython_EXECUTABLE="$(command -v python)" \
    -DLITE_TARGET_PYTHON_ROOT="$python_root" -DLITE_PYTHON="$([ -n "$python_root" ] && echo ON || echo OFF)" \
    > build/arm64.configure.log
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
