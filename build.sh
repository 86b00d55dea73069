#!/usr/bin/env bash
# One-command set-up.
#   ./build.sh          create .venv, install dependencies, build (editable), run the demo
#   ./build.sh test     the same set-up, then the test suite (extra args go to pytest)
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

# Build the C++ core and the Python extension; CMake rebuilds only what changed.
python -m pip install -q --no-build-isolation --no-deps -e .

case "${1:-demo}" in
  demo)
    python examples/demo.py
    ;;
  test)
    shift || true
    python -m pytest -q "$@"
    ;;
  *)
    echo "usage: ./build.sh [demo|test [pytest args]]" >&2
    exit 2
    ;;
esac
