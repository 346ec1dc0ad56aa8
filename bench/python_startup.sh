#!/usr/bin/env bash
# Whole-process time of the Python module: the interpreter, `import memest` and one estimate,
# next to the bare interpreter (docs/performance.md; the goal is under 20 ms). Needs hyperfine
# (Debian's package) and a built module:
#   cmake --workflow --preset python && bash bench/python_startup.sh [BUILD_DIR] [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/python}
runs=${2:-100}
py=${PYTHON:-/usr/bin/python3}
test -n "$(ls "$build"/python/memest.*.so 2>/dev/null)" || {
  echo "no module in $build/python: cmake --workflow --preset python" >&2
  exit 2
}
estimate='import memest; memest.estimate(model="llama-2-7b", batch=1, seq=4096, precision="mixed-bf16")'
# Every process gets the same environment: a command prefixed with `env VAR=...` would also
# time the exec of env itself (4 ms here).
export PYTHONPATH="$build/python"
hyperfine -N --warmup 5 --runs "$runs" \
  "$py -c pass" \
  "$py -c 'import memest'" \
  "$py -c '$estimate'"
