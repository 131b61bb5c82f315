#!/usr/bin/env bash
# stackscan against JAX on the same tiny Llama, side by side in one run (issue 31's table):
# for each row (batch × seq, layers) it times `llama_step.py` (JAX's fastest form: shard_map,
# scanned layers, per-layer checkpoint, Adam, donated state) and `stackscan bench` (prefetch
# off / on / deferred), both on 4 virtual CPU devices, median of 10 steps after 2 warm-up
# steps, and prints a Markdown table of step times, the ratio on / JAX and compiled temp
# memory per device. Not part of CI: it installs JAX into a scratch virtual environment.
#
# A shared machine drifts by more than the differences measured here, so each row runs
# REPEATS times (default 3), the frameworks taking turns within each repeat, and a time in
# the table is the median over the repeats of each run's median step.
#
#   examples/jax/compare.sh [STACKSCAN_BINARY] [OUT_DIR]
#
# STACKSCAN_BINARY defaults to target/release/stackscan; OUT_DIR (default jax-compare) gets
# each run's JSON. JAX_VERSION (default 0.10.2) picks the JAX release; VENV (default
# $OUT_DIR/venv) where it is installed; ROWS the rows as "batch:seq:layers" words;
# STACKSCAN_ARGS more `bench` options (e.g. `--plugin cpu-0.115`); JAX_ARGS more
# `llama_step.py` options (e.g. `--fused`: the form that gathers and multiplies W_q | W_k | W_v
# and W_gate | W_up as one weight each, which stackscan's Llama does not do). RUNNER, the path of
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
median() { # median of the numbers given
  "$venv/bin/python" -c 'import statistics, sys; print(statistics.median(map(float, sys.argv[1:])))' "$@"
}
ms_of() { # milliseconds, one decimal, of the median of the seconds given
  "$venv/bin/python" -c "print(f'{$(median "$@") * 1e3:.1f}')"
}
mb_of() { # megabytes, one decimal, of a byte count
  "$venv/bin/python" -c "print(f'{$1 / 1e6:.1f}')"
}
repeats=${REPEATS:-3}
for row in $rows; do
  IFS=: read -r batch seq layers <<< "$row"
  name="b${batch}-s${seq}-l${layers}"
  export_args=()
  [ -n "$runner" ] && export_args=(--export "$out/$name-jax.mlir")
  jax_s=() there_s=() off_s=() on_s=() deferred_s=()
  for r in $(seq "$repeats"); do
    "$venv/bin/python" "$here/llama_step.py" --devices 4 --layers "$layers" --batch "$batch" \
      --seq "$seq" --steps 10 --warmup 2 ${JAX_ARGS:-} "${export_args[@]}" \
      2> "$out/$name-$r-jax.log" | tail -n 1 > "$out/$name-$r-jax.json"
    jax_s+=("$(field "$out/$name-$r-jax.json" step_seconds_median)")
    if [ -n "$runner" ]; then
      "$runner" "$out/$name-jax.mlir" "${RUNNER_PLUGIN:-cpu}" 4 10 2 2> "$out/$name-$r-runner.log" \
        | tail -n 1 > "$out/$name-$r-runner.json"
      there_s+=("$(field "$out/$name-$r-runner.json" step_seconds_median)")
    fi
    "$bin" bench --devices 4 --model llama --layers "$layers" --batch "$batch" --seq "$seq" \
      --steps 10 --warmup 2 --options off,on,deferred --compile-depths ${STACKSCAN_ARGS:-} \
      --out "$out/$name-$r-stackscan.json" > /dev/null 2> "$out/$name-$r-stackscan.log"
    off_s+=("$(run_field "$out/$name-$r-stackscan.json" off step_seconds_median)")
    on_s+=("$(run_field "$out/$name-$r-stackscan.json" on step_seconds_median)")
    deferred_s+=("$(run_field "$out/$name-$r-stackscan.json" deferred step_seconds_median)")
  done
  jax_ms=$(ms_of "${jax_s[@]}")
  jax_mb=$(mb_of "$(field "$out/$name-1-jax.json" temp_bytes)")
  ms=("$(ms_of "${off_s[@]}")" "$(ms_of "${on_s[@]}")" "$(ms_of "${deferred_s[@]}")")
  mb=()
  for schedule in off on deferred; do
    mb+=("$(mb_of "$(run_field "$out/$name-1-stackscan.json" "$schedule" memory.temp)")")
  done
  ratio=$("$venv/bin/python" -c "print(f'{${ms[1]} / $jax_ms:.2f}')")
  if [ -n "$runner" ]; then
    there_ms=$(ms_of "${there_s[@]}")
    there_mb=$(mb_of "$(field "$out/$name-1-runner.json" temp_bytes)")
    there=$("$venv/bin/python" -c "print(f'{${ms[1]} / $there_ms:.2f}')")
    echo "| $batch × $seq, $layers | $jax_ms | $there_ms | ${ms[0]} / ${ms[1]} / ${ms[2]} | $ratio | $there | $jax_mb / $there_mb | ${mb[0]} / ${mb[1]} / ${mb[2]} |"
  else
    echo "| $batch × $seq, $layers | $jax_ms | ${ms[0]} / ${ms[1]} / ${ms[2]} | $ratio | $jax_mb | ${mb[0]} / ${mb[1]} / ${mb[2]} |"
  fi
done
