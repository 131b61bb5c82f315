#!/usr/bin/env bash
# The seed's three workloads at published scale, compiled by libtpu for a TPU7x slice on a
# machine without a TPU (`stackscan compile-report --topology`), prefetch off and on +
# deferred, f32 master weights with bf16 compute:
#   1. DeepSeek-V3 671B, FSDP only;
#   2. DeepSeek-V3 671B, expert parallelism 4 (`--ep 4`);
#   3. Qwen3.5-35B-A3B, the nested [GDN, GDN, GDN, attention] × 10 scan;
# and DeepSeek-V3 671B as it fits the default slice: expert parallelism 32 (8 experts a rank)
# and 1024 tokens a device.
# Each compile's JSON report goes to OUT, and a table of HBM per device, overlapped
# collectives and compile time is printed at the end. Not run in CI: each compile takes
# minutes on a 2-core machine.
#
#   examples/tpu/workloads.sh [STACKSCAN_BINARY] [OUT]
#
# STACKSCAN_BINARY defaults to target/release/stackscan, OUT to tpu-out; TOPOLOGY (default
# tpu7x:4x4x4, 64 chips, 128 devices) picks the slice.
set -euo pipefail

bin=${1:-target/release/stackscan}
out=${2:-tpu-out}
topology=${TOPOLOGY:-tpu7x:4x4x4}
mkdir -p "$out"

run() {
  local name=$1
  shift
  if [ -s "$out/$name.json" ]; then
    echo "$name: kept $out/$name.json"
    return
  fi
  echo "$name: compiling ($*)"
  if ! "$bin" compile-report --topology "$topology" --precision bf16 --json "$@" \
    > "$out/$name.json.tmp" 2> "$out/$name.log"; then
    echo "$name: failed, see $out/$name.log"
    rm -f "$out/$name.json.tmp"
    return
  fi
  mv "$out/$name.json.tmp" "$out/$name.json"
}

for schedule in off on; do
  flags=()
  [ "$schedule" = off ] && flags=(--no-prefetch)
  run "deepseek3-fsdp-$schedule" --model deepseek3 --config deepseek3 "${flags[@]}"
  run "deepseek3-ep4-$schedule" --model deepseek3 --config deepseek3 --ep 4 "${flags[@]}"
  run "qwen35-$schedule" --model qwen35 --config qwen35-35b-a3b "${flags[@]}"
  run "deepseek3-ep32-seq1024-$schedule" --model deepseek3 --config deepseek3 --ep 32 \
    --seq 1024 "${flags[@]}"
done

python3 "$(dirname "$0")/table.py" "$out"/*.json
