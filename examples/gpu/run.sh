#!/usr/bin/env bash
# The GPU check: on a machine with one NVIDIA GPU whose Python has JAX's CUDA PJRT plugin
# (`jax_plugins.xla_cuda13`) and no network, runs a `stackscan` binary built elsewhere on that
# plugin:
#   1. `bench` of a ~1.1B-parameter Llama (llama-1b.toml: d 2048, 16 layers, seq 2048) in f32
#      and in bf16, prefetch off / on / deferred, 5 timed steps each;
#   2. `compile-report` of the same Llama in f32 and bf16: compile time, the compiled temp
#      memory and the bytes of each collective by element type, from the optimized program;
#   3. one training step of each tiny model (llama, deepseek3, qwen35) in f32 and bf16.
# It writes the reports, logs and versions under OUT. Each command is capped (a bench at
# 130 s, a compile report and a training step at 35 s: 540 s in all), so the whole stays under
# 10 minutes; a command over its cap is reported and the rest still run. Not yet run on a GPU: no device machine has been
# lent to a session since it was written.
#
#   examples/gpu/run.sh [STACKSCAN_BINARY] [OUT]
#
# STACKSCAN_BINARY defaults to target/release/stackscan, OUT to $OUT or ./gpu-out. PYTHON
# names the interpreter that has JAX (default python3).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
bin=${1:-target/release/stackscan}
out=${2:-${OUT:-gpu-out}}
py=${PYTHON:-python3}
mkdir -p "$out"

# The plugin's shared library, from the installed package (nothing is fetched).
plugin_dir=$("$py" -c 'import os, jax_plugins.xla_cuda13 as p; print(os.path.dirname(p.__file__))')
plugin=$(ls "$plugin_dir"/*.so | head -n 1)
site=$(dirname "$(dirname "$plugin_dir")")
# The CUDA libraries of pip's nvidia-* packages, and ptxas/libdevice for XLA's compiler.
for lib in "$site"/nvidia/*/lib; do
  [ -d "$lib" ] && LD_LIBRARY_PATH="$lib:${LD_LIBRARY_PATH:-}"
done
export LD_LIBRARY_PATH
for cuda in "$site"/nvidia/cu13 "$site"/nvidia/cuda_nvcc; do
  if [ -x "$cuda/bin/ptxas" ]; then
    export PATH="$cuda/bin:$PATH"
    export XLA_FLAGS="--xla_gpu_cuda_data_dir=$cuda ${XLA_FLAGS:-}"
    break
  fi
done

{
  date -u +%Y-%m-%dT%H:%M:%SZ
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
  "$py" -c 'import jax, jaxlib; print("jax", jax.__version__, "jaxlib", jaxlib.__version__)' || true
  "$py" -m pip list 2>/dev/null | grep -i -E '^(jax|nvidia-cuda-runtime)' || true
  echo "plugin $plugin"
  "$bin" --version
} > "$out/versions.txt" 2>&1
cat "$out/versions.txt"

status=0
step() {
  local name=$1 limit=$2
  shift 2
  echo "== $name: $*"
  local rc=0
  timeout "$limit" "$@" > "$out/$name.log" 2>&1 || rc=$?
  if [ "$rc" -ne 0 ]; then
    if [ "$rc" -eq 124 ]; then
      echo "!! $name ran over its ${limit} s"
    else
      echo "!! $name failed (exit $rc)"
    fi
    status=1
  fi
  tail -n 4 "$out/$name.log"
}

for precision in f32 bf16; do
  step "bench-llama-1b-$precision" 130 \
    "$bin" bench --plugin "$plugin" --devices 1 --model llama --config "$here/llama-1b.toml" \
    --precision "$precision" --options off,on,deferred --steps 5 --warmup 2 \
    --compile-depths --out "$out/bench-llama-1b-$precision.json"
done
for precision in f32 bf16; do
  step "compile-report-llama-1b-$precision" 35 \
    "$bin" compile-report --plugin "$plugin" --devices 1 --model llama \
    --config "$here/llama-1b.toml" --precision "$precision" --json
done
for model in llama deepseek3 qwen35; do
  for precision in f32 bf16; do
    step "train-$model-$precision" 35 \
      "$bin" train --plugin "$plugin" --devices 1 --model "$model" --steps 1 \
      --precision "$precision" --no-compile-cache
  done
done
exit $status
