#!/usr/bin/env bash
# One entry point for setting up, building and testing memest on Debian 12.
#   bash scripts/dev.sh demo   install what is missing, build (release), run the main example
#   bash scripts/dev.sh test   install what is missing, build and run every test (dev + asan),
#                              then each fuzz target for a few seconds (scripts/fuzz.sh)
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(cmake ninja-build g++ clang-format git libcli11-dev nlohmann-json3-dev libfmt-dev
          catch2 libbenchmark-dev python3 python3-jsonschema clang libclang-rt-dev
          python3-dev pybind11-dev python3-pybind11 python3-pytest)

install_missing() {
  local missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "memest: installing ${missing[*]}" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

case "${1:-}" in
  demo)
    install_missing
    cmake --workflow --preset release
    ./build/release/memest --params 7B --optimizer adamw --amp
    ;;
  test)
    install_missing
    # Formatting is part of the suite: every C++ file as .clang-format says.
    git ls-files '*.cpp' '*.hpp' | xargs clang-format --dry-run --Werror
    cmake --workflow --preset dev
    cmake --workflow --preset asan
    # libFuzzer + ASan + UBSan, 5 s per target: a smoke run that keeps the targets building and
    # replays the corpus; a real run is `bash scripts/fuzz.sh` (docs/hardening.md).
    bash scripts/fuzz.sh 5
    ;;
  *)
    echo "usage: bash scripts/dev.sh demo|test" >&2
    exit 2
    ;;
esac
