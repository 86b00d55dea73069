#!/usr/bin/env bash
# One-command set-up.
#   ./build.sh          create .venv, install dependencies, build (editable), run the demo
#   ./build.sh test     the same set-up, then the test suite (extra args go to pytest)
#   ./build.sh asan     the same set-up, then an ASan+UBSan build of the runtime (build/asan) and the sanitizer fuzz
#                       job on it (extra args go to tests/fuzz/sanitizer_fuzz.py, e.g. --ms 10000 --onnx 1000)
#   ./build.sh setup    the set-up alone;  ./build.sh asan-build  the dependencies and the sanitizer build alone
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

# Build the C++ core and the Python extension; CMake rebuilds only what changed. (Not for asan-build: CI runs it
# beside the tests, and reinstalling the package would pull the extension from under them.)
# A stamp of the native sources skips the reinstall when nothing native changed (Python files are served from the
# source tree by the editable install).
native=$(find lite/src lite/include lite/schema cmake CMakeLists.txt pyproject.toml -type f | LC_ALL=C sort \
         | xargs cat | sha256sum | cut -d' ' -f1)
if [ "${1:-demo}" != asan-build ] && { [ ! -f .venv/.native.sha ] || [ "$(cat .venv/.native.sha)" != "$native" ] \
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
  *)
    echo "usage: ./build.sh [demo|setup|test [pytest args]|asan [fuzz args]|asan-build]" >&2
    exit 2
    ;;
esac
