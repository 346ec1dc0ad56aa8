#!/usr/bin/env bash
# One entry point for setting up, building and testing memest on Debian 12.
#   bash scripts/dev.sh demo   install what is missing, build (release), run the main example
#   bash scripts/dev.sh test   install what is missing, build and run every test (dev + asan),
#                              clang-tidy on the sources changed since its recorded clean pass,
#                              the web page in headless chromium (tests/web), then each fuzz
#                              target for a few seconds (scripts/fuzz.sh)
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(cmake ninja-build g++ clang-format clang-tidy git libcli11-dev nlohmann-json3-dev libfmt-dev
          libyaml-cpp-dev libtomlplusplus-dev
          catch2 libbenchmark-dev python3 python3-jsonschema clang libclang-rt-dev
          python3-dev pybind11-dev python3-pybind11 python3-pytest)

# The web page (web/, tests/web): emscripten builds it, chromium runs it under puppeteer-core (npm).
web_packages=(emscripten chromium)

install_missing() {
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "memest: installing ${missing[*]}" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# Debian's node and npm only where none is on PATH: Debian's npm conflicts with a nodejs from
# elsewhere (NodeSource's, say).
node_packages() {
  command -v node >/dev/null || echo nodejs
  command -v npm >/dev/null || echo npm
}

# The browser test's npm packages as tests/web/package-lock.json pins them, when the lock changed.
install_npm() {
  if [ ! -d tests/web/node_modules/puppeteer-core ] ||
     [ tests/web/package-lock.json -nt tests/web/node_modules/.package-lock.json ]; then
    (cd tests/web && npm ci --no-audit --no-fund --loglevel=error)
  fi
}

case "${1:-}" in
  demo)
    install_missing "${packages[@]}"
    cmake --workflow --preset release
    ./build/release/memest --params 7B --optimizer adamw --amp
    ;;
  test)
    # shellcheck disable=SC2046  # node_packages prints zero, one or two names
    install_missing "${packages[@]}" "${web_packages[@]}" $(node_packages)
    install_npm
    # Formatting is part of the suite: every C++ file as .clang-format says.
    git ls-files '*.cpp' '*.hpp' | xargs clang-format --dry-run --Werror
    cmake --workflow --preset dev
    # clang-tidy (.clang-tidy) on the sources changed since the last recorded clean pass
    # (.ci/tidy-clean; scripts/tidy.py says how a source's key is made).
    python3 scripts/tidy.py build/dev
    cmake --workflow --preset asan
    # The web page: the command line compiled to WebAssembly, checked in a real browser against
    # the dev build's binary (tests/web/page_test.js; screenshot in build/web/page.png).
    cmake --workflow --preset web
    node tests/web/page_test.js
    # libFuzzer + ASan + UBSan, 5 s per target, on the asan build's targets: a smoke run that
    # keeps the targets building and replays the corpus; a real run is `bash scripts/fuzz.sh`
    # (its own optimised build, docs/hardening.md).
    MEMEST_FUZZ_PRESET=asan bash scripts/fuzz.sh 5
    ;;
  *)
    echo "usage: bash scripts/dev.sh demo|test" >&2
    exit 2
    ;;
esac
