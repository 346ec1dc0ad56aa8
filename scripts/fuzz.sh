#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz (the fuzz preset: clang, ASan, UBSan) and runs each
# for SECONDS (default 600), seeded with configs/, tests/data/, the README's commands and small
# GGUF headers. What a run finds is kept: new inputs in build/fuzz/corpus/<target>, a crash as
# build/fuzz/artifacts/<target>-crash-<hash> (replay: build/fuzz/tests/fuzz/fuzz_<target> FILE).
#   bash scripts/fuzz.sh [SECONDS] [TARGET...]   targets: hf_config run_config units cli gguf
#                                                from_yaml from_toml from_args from_json
# MEMEST_FUZZ_PRESET=asan takes the targets of the asan build instead (a debug build, slower per
# input; the test command's smoke run uses it so that one sanitized build serves both), and
# keeps what it finds under build/asan/. An input that runs past the timeout counts as a hang:
# 10 s on the optimised fuzz build, 60 s on the asan build, which is unoptimised and instruments
# every comparison (the README's `fit --gpus 8` example, 0.3 s in the dev build, takes 12 s there).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${1:-600}"
[ $# -gt 0 ] && shift
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(hf_config run_config units cli gguf from_yaml from_toml from_args from_json)

preset="${MEMEST_FUZZ_PRESET:-fuzz}"
out="build/$preset"
timeout=10
[ "$preset" = asan ] && timeout=60
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -j "${MEMEST_JOBS:-2}"
rm -rf "$out/seeds"
python3 tests/fuzz/seeds.py "$out/seeds"
mkdir -p "$out/artifacts"

for t in "${targets[@]}"; do
  case "$t" in
    units) max_len=256 dict=() ;;
    cli) max_len=2048 dict=() ;;
    gguf) max_len=65536 dict=() ;;
    from_*) max_len=16384 dict=() ;;
    *) max_len=65536 dict=(-dict=tests/fuzz/json.dict) ;;
  esac
  mkdir -p "$out/corpus/$t"
  log="$out/$t.log"
  # -timeout: an input that takes longer is a hang; -rss_limit_mb: one that needs 2 GB a leak.
  if ! "$out/tests/fuzz/fuzz_$t" "$out/corpus/$t" "$out/seeds/$t" "${dict[@]}" \
      -max_total_time="$seconds" -max_len="$max_len" -timeout="$timeout" -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="$out/artifacts/$t-" >"$log" 2>&1; then
    tail -n 60 "$log" >&2
    echo "fuzz_$t: a finding (input in $out/artifacts/, log in $log)" >&2
    exit 1
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  echo "fuzz_$t: ${runs:-?} executions in ${seconds} s, no finding"
done
