"""The table of examples/tpu/maxtext.sh: HBM per device and compile time of MaxText's and
stackscan's DeepSeek-V3 steps for one TPU slice, from the run directory given."""

import glob
import json
import os
import re
import sys

out = sys.argv[1]


def gib(n):
    return n / 2**30


def maxtext_row(path):
    text = open(path).read()
    m = re.search(r"Memory analysis: CompiledMemoryStats\((.*?)\)", text)
    start = re.search(r"^(\d+\.\d+) Jitting and compiling train step", text, re.M)
    done = re.search(r"^(\d+\.\d+) Jitting and compilation complete", text, re.M)
    if not m:
        return None
    seconds = float(done.group(1)) - float(start.group(1)) if start and done else None
    stats = dict(re.findall(r"(\w+)=(\d+)", m.group(1)))
    state = int(stats["argument_size_in_bytes"]) + int(stats["output_size_in_bytes"]) - int(
        stats["alias_size_in_bytes"]
    )
    temp = int(stats["temp_size_in_bytes"])
    return state, temp, seconds


print("| model | run | state / device | temp / device | total | compile |")
print("|---|---|---|---|---|---|")
for size in ("tiny", "full"):
    m = os.path.join(out, "maxtext-%s.log" % size)
    if os.path.exists(m) and (r := maxtext_row(m)):
        compile_s = "?" if r[2] is None else "%.0f s" % r[2]
        print("| %s | MaxText 0.2.5 default | %.3f GiB | %.3f GiB | %.3f GiB | %s |"
              % (size, gib(r[0]), gib(r[1]), gib(r[0] + r[1]), compile_s))
    for s in ("off", "on", "deferred"):
        p = os.path.join(out, "stackscan-%s-%s.json" % (size, s))
        if not os.path.exists(p):
            continue
        t = json.load(open(p))
        tpu = t["tpu"]
        state = tpu["arguments"] + tpu["outputs"] - tpu["alias"]
        print("| %s | stackscan %s | %.3f GiB | %.3f GiB | %.3f GiB | %.0f s |"
              % (size, s, gib(state), gib(tpu["temp"]), gib(tpu["total"]), t["xla_compile_seconds"]))
