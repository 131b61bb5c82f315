#!/usr/bin/env bash
# stackscan against MaxText on the same TPU compiler: both AOT-compile a DeepSeek-V3 training
# step for one TPU7x slice with libtpu on a machine without a TPU, and the table compares HBM
# per device and compile time. MaxText 0.2.5 predates the reference's prefetch flags, so its
# default schedule stands beside stackscan's off, on and on + deferred.
#   1. `deepseek3-tiny`: MaxText's model config of that name, and stackscan's DeepSeek-V3 at
#      the same sizes (maxtext-deepseek3-tiny.toml), 2 sequences of 64 tokens a device;
#   2. DeepSeek-V3 671B (`deepseek3-671b`, stackscan's `deepseek3` preset), bf16 compute,
#      1 sequence of SEQ tokens a device, on FULL_TOPOLOGY (default tpu7x:4x4x4, MaxText's
#      FULL_MAXTEXT_TOPOLOGY tpu7x-128: 64 chips, FSDP over its 128 devices).
# Not run in CI. Needs a Python with `maxtext[tpu]==0.2.5` (it brings jax and libtpu 0.0.52,
# the libtpu stackscan pins):
#
#   python3.12 -m venv mt && mt/bin/pip install "maxtext[tpu]==0.2.5"
#   MAXTEXT_PYTHON=mt/bin/python3 examples/tpu/maxtext.sh [STACKSCAN_BINARY] [OUT]
#
# TOPOLOGY (the tiny runs' slice, default tpu7x:2x2x1), MAXTEXT_TOPOLOGY (MaxText's name for
# it, default tpu7x-8), SEQ (default 4096) and FULL=0 (tiny only) adjust it.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
bin=${1:-target/release/stackscan}
out=${2:-tpu-maxtext-out}
py=${MAXTEXT_PYTHON:-python3}
topology=${TOPOLOGY:-tpu7x:2x2x1}
mt_topology=${MAXTEXT_TOPOLOGY:-tpu7x-8}
seq=${SEQ:-4096}
full_topology=${FULL_TOPOLOGY:-tpu7x:4x4x4}
full_mt_topology=${FULL_MAXTEXT_TOPOLOGY:-tpu7x-128}
mkdir -p "$out"
base=$("$py" -c 'import maxtext, os; print(os.path.join(os.path.dirname(maxtext.__file__), "configs", "base.yml"))')

# What stackscan's compile-only runs set for libtpu without a TPU (docs/tpu.md: "Compile for a TPU
# pod you don't have"); JAX on the CPU backend, the TPU only as a compile target.
export TPU_SKIP_MDS_QUERY=1 TPU_WORKER_HOSTNAMES=localhost ALLOW_MULTIPLE_LIBTPU_LOAD=1
export JAX_PLATFORMS=cpu

maxtext() {
  local name=$1
  shift
  [ -s "$out/maxtext-$name.log" ] && grep -q 'Memory analysis' "$out/maxtext-$name.log" && return
  # Each line stamped with the time it arrived: the compile is the time between MaxText's
  # "Jitting and compiling train step..." and "Jitting and compilation complete!".
  PYTHONUNBUFFERED=1 "$py" -m maxtext.trainers.pre_train.train_compile "$base" \
    compile_topology="$mt_topology" compile_topology_num_slices=1 \
    base_output_directory="$out/maxtext-runs" enable_checkpointing=false \
    jax_cache_dir="" run_name="$name" "$@" 2>&1 \
    | while IFS= read -r line; do printf '%s %s\n' "$(date +%s.%N)" "$line"; done \
    > "$out/maxtext-$name.log" || echo "maxtext $name: failed"
}

stackscan() {
  local name=$1
  shift
  [ -s "$out/stackscan-$name.json" ] && return
  if "$bin" compile-report --topology "$topology" --json "$@" \
    > "$out/stackscan-$name.json.tmp" 2> "$out/stackscan-$name.log"; then
    mv "$out/stackscan-$name.json.tmp" "$out/stackscan-$name.json"
  else
    echo "stackscan $name: failed, see $out/stackscan-$name.log"
    rm -f "$out/stackscan-$name.json.tmp"
  fi
}

maxtext tiny model_name=deepseek3-tiny per_device_batch_size=2 max_target_length=64
for s in off on deferred; do
  flags=()
  [ "$s" = off ] && flags=(--no-prefetch)
  [ "$s" = on ] && flags=(--no-defer)
  stackscan "tiny-$s" --model deepseek3 --config "$here/maxtext-deepseek3-tiny.toml" "${flags[@]}"
done
if [ "${FULL:-1}" = 1 ]; then
  topology=$full_topology mt_topology=$full_mt_topology
  maxtext full model_name=deepseek3-671b per_device_batch_size=1 max_target_length="$seq" \
    weight_dtype=float32 dtype=bfloat16
  # off-u1 and deferred-u1: one layer a loop trip, as MaxText scans.
  for s in off on deferred off-u1 deferred-u1; do
    flags=()
    case $s in
      off) flags=(--no-prefetch) ;;
      on) flags=(--no-defer) ;;
      off-u1) flags=(--no-prefetch --unroll 1) ;;
      deferred-u1) flags=(--unroll 1) ;;
    esac
    stackscan "full-$s" --model deepseek3 --config deepseek3 --seq "$seq" --precision bf16 \
      "${flags[@]}"
  done
fi
python3 "$here/maxtext_table.py" "$out"
