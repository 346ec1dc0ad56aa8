#!/usr/bin/env bash
# Installs the build into a temporary prefix, builds examples/consumer against it with
# find_package(memest), and runs it. usage: install_check.sh BUILD_DIR SOURCE_DIR [SANITIZE]
set -euo pipefail
build=$1 src=$2 sanitize=${3:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
flags=()
if [ -n "$sanitize" ]; then
  flags=(-DCMAKE_CXX_FLAGS="-fsanitize=$sanitize" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=$sanitize")
fi
cmake -S "$src/examples/consumer" -B "$tmp/build" -G Ninja -DCMAKE_PREFIX_PATH="$tmp/prefix" "${flags[@]}" >/dev/null
cmake --build "$tmp/build" >/dev/null
"$tmp/build/consumer"
test -x "$tmp/prefix/bin/memest"
test -f "$tmp/prefix/share/memest/models/llama-2-7b.json"
(cd "$tmp" && "$tmp/prefix/bin/memest" --model llama-2-7b --format json | grep -q '"total": 6738415616')
echo "installed binary, presets and package work"
