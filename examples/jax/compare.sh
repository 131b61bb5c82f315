#!/usr/bin/env bash
# stackscan against JAX on the same tiny Llama, side by side in one run (issue 31's table):
# for each row (batch × seq, layers) it times `llama_step.py` (JAX's fastest form: shard_map,
# scanned layers, per-layer checkpoint, Adam, donated state) and `stackscan bench` (prefetch
# off / on / deferred), both on 4 virtual CPU devices, median of 10 steps after 2 warm-up
# steps, and prints a Markdown table of step times, the ratio on / JAX and compiled temp
# memory per device. Not part of CI: it installs JAX into a scratch virtual environment.
#
#   examples/jax/compare.sh [STACKSCAN_BINARY] [OUT_DIR]
#
# STACKSCAN_BINARY defaults to target/release/stackscan; OUT_DIR (default jax-compare) gets
# each run's JSON. JAX_VERSION (default 0.10.2) picks the JAX release; VENV (default
# $OUT_DIR/venv) where it is installed; ROWS the rows as "batch:seq:layers" words;
# STACKSCAN_ARGS more `bench` options (e.g. `--plugin cpu-0.115`). RUNNER, the path of
# `run_stablehlo` (`cargo build --release -p stackscan-runtime --example run_stablehlo`), adds
# a column: JAX's own step program (its StableHLO, exported) run through stackscan's plugin,
# the same program on the same XLA as stackscan's step, so the two programs compare apart
# from the kernels each XLA has. RUNNER_PLUGIN (default `cpu`) picks that plugin.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
bin=${1:-target/release/stackscan}
out=${2:-jax-compare}
venv=${VENV:-$out/venv}
rows=${ROWS:-"8:64:4 8:64:16 16:128:4 16:128:16"}
mkdir -p "$out"

if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet "jax==${JAX_VERSION:-0.10.2}" "jaxlib==${JAX_VERSION:-0.10.2}"
fi

field() { # field FILE KEY: a number from a flat JSON object
  "$venv/bin/python" -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"
}
run_field() { # run_field FILE SCHEDULE KEY: from a bench report's run of that schedule
  "$venv/bin/python" - "$1" "$2" "$3" <<'EOF'
import json, sys
report = json.load(open(sys.argv[1]))
run = next(r for r in report["runs"] if r["schedule"] == sys.argv[2])
value = run
for part in sys.argv[3].split("."):
    value = value[part]
print(value)
EOF
}

runner=${RUNNER:-}
if [ -n "$runner" ]; then
  echo "| batch × seq, layers | JAX (ms) | JAX's program on stackscan's plugin (ms) | stackscan off / on / deferred (ms) | on / JAX | on / JAX's program there | temp MB JAX / its program there | temp MB off / on / deferred |"
  echo "|---|---|---|---|---|---|---|---|"
else
  echo "| batch × seq, layers | JAX (ms) | stackscan off / on / deferred (ms) | on / JAX | temp MB JAX | temp MB off / on / deferred |"
  echo "|---|---|---|---|---|---|"
fi
for row in $rows; do
  IFS=: read -r batch seq layers <<< "$row"
  name="b${batch}-s${seq}-l${layers}"
  export_args=()
  [ -n "$runner" ] && export_args=(--export "$out/$name-jax.mlir")
  "$venv/bin/python" "$here/llama_step.py" --devices 4 --layers "$layers" --batch "$batch" \
    --seq "$seq" --steps 10 --warmup 2 "${export_args[@]}" 2> "$out/$name-jax.log" \
    | tail -n 1 > "$out/$name-jax.json"
  if [ -n "$runner" ]; then
    "$runner" "$out/$name-jax.mlir" "${RUNNER_PLUGIN:-cpu}" 4 10 2 2> "$out/$name-runner.log" \
      | tail -n 1 > "$out/$name-runner.json"
  fi
  "$bin" bench --devices 4 --model llama --layers "$layers" --batch "$batch" --seq "$seq" \
    --steps 10 --warmup 2 --options off,on,deferred --compile-depths ${STACKSCAN_ARGS:-} \
    --out "$out/$name-stackscan.json" > /dev/null 2> "$out/$name-stackscan.log"
  jax_ms=$("$venv/bin/python" -c "print(f'{$(field "$out/$name-jax.json" step_seconds_median) * 1e3:.1f}')")
  jax_mb=$("$venv/bin/python" -c "print(f'{$(field "$out/$name-jax.json" temp_bytes) / 1e6:.1f}')")
  ms=() mb=()
  for schedule in off on deferred; do
    ms+=("$("$venv/bin/python" -c "print(f'{$(run_field "$out/$name-stackscan.json" "$schedule" step_seconds_median) * 1e3:.1f}')")")
    mb+=("$("$venv/bin/python" -c "print(f'{$(run_field "$out/$name-stackscan.json" "$schedule" memory.temp) / 1e6:.1f}')")")
  done
  ratio=$("$venv/bin/python" -c "print(f'{${ms[1]} / $jax_ms:.2f}')")
  if [ -n "$runner" ]; then
    there_ms=$("$venv/bin/python" -c "print(f'{$(field "$out/$name-runner.json" step_seconds_median) * 1e3:.1f}')")
    there_mb=$("$venv/bin/python" -c "print(f'{$(field "$out/$name-runner.json" temp_bytes) / 1e6:.1f}')")
    there=$("$venv/bin/python" -c "print(f'{${ms[1]} / $there_ms:.2f}')")
    echo "| $batch × $seq, $layers | $jax_ms | $there_ms | ${ms[0]} / ${ms[1]} / ${ms[2]} | $ratio | $there | $jax_mb / $there_mb | ${mb[0]} / ${mb[1]} / ${mb[2]} |"
  else
    echo "| $batch × $seq, $layers | $jax_ms | ${ms[0]} / ${ms[1]} / ${ms[2]} | $ratio | $jax_mb | ${mb[0]} / ${mb[1]} / ${mb[2]} |"
  fi
done
