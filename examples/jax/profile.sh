#!/usr/bin/env bash
# Where the CPU time of a training step goes, stackscan's and JAX's side by side: runs
# `stackscan bench` (prefetch on) and llama_step.py on one row of compare.sh's table, records
# each with `perf` in its steady state (after WAIT seconds, for SECS) and sorts the samples
# into categories (perf_categories.py): dot kernels, XLA's compiled fusions, collectives,
# copies, allocator, runtime, kernel.
#
#   examples/jax/profile.sh target/release/stackscan [OUT]    (ROW=8:64:16 by default)
#
# Needs `perf` (Debian: `apt-get install linux-perf`) and compare.sh's venv (VENV). Not
# part of CI. perf_event_paranoid 2 is enough: it records user and kernel time of our own
# processes.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
bin=${1:-target/release/stackscan}
out=${2:-jax-profile}
venv=${VENV:-jax-compare/venv}
IFS=: read -r batch seq layers <<< "${ROW:-8:64:16}"
mkdir -p "$out"

record() { # record NAME CMD...: perf of CMD's steady state, then its categories
  local name=$1
  shift
  "$@" > "$out/$name.log" 2>&1 &
  local pid=$!
  sleep "${WAIT:-25}"
  cat "/proc/$pid/maps" > "$out/$name.maps"
  perf record -e cpu-clock -F 999 -p "$pid" -o "$out/$name.perf" -- sleep "${SECS:-10}" \
    > /dev/null 2>&1
  kill "$pid" 2> /dev/null || true
  wait "$pid" 2> /dev/null || true
  echo "## $name ($batch × $seq, $layers layers, 4 devices)"
  python3 "$here/perf_categories.py" "$out/$name.maps" "$out/$name.perf"
}

record stackscan "$bin" bench --devices 4 --model llama --layers "$layers" --batch "$batch" \
  --seq "$seq" --steps 100000 --warmup 2 --options on --compile-depths ${STACKSCAN_ARGS:-} \
  --out "$out/stackscan.json"
record jax "$venv/bin/python" "$here/llama_step.py" --devices 4 --layers "$layers" \
  --batch "$batch" --seq "$seq" --steps 100000 --warmup 2 ${JAX_ARGS:-}
