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


# libtpu's refusal of a step that does not fit: "the total memory required for HLO
# temporaries (115.91G) exceeds available HBM (94.74G)"; its unit letters are binary.
OOM = re.compile(r"HLO temporaries \((\d+(?:\.\d+)?)([KMGT])\)")


def oom_temporaries(text):
    m = OOM.search(text)
    if not m:
        return None
    return float(m.group(1)) * 2 ** (10 * "KMGT".index(m.group(2)) + 10)


def maxtext_row(path):
    """(state or None, temporaries, compile seconds or None), or None without either a memory
    analysis or libtpu's refusal. A refused compile ends at the first line after the start
    that says so."""
    text = open(path).read()
    m = re.search(r"Memory analysis: CompiledMemoryStats\((.*?)\)", text)
    start = re.search(r"^(\d+\.\d+) Jitting and compiling train step", text, re.M)
    done = re.search(r"^(\d+\.\d+) Jitting and compilation complete", text, re.M)
    if not done:
        done = re.search(r"^(\d+\.\d+) .*HLO temporaries \(", text, re.M)
    seconds = float(done.group(1)) - float(start.group(1)) if start and done else None
    if not m:
        temp = oom_temporaries(text)
        return None if temp is None else (None, temp, seconds)
    stats = dict(re.findall(r"(\w+)=(\d+)", m.group(1)))
    state = int(stats["argument_size_in_bytes"]) + int(stats["output_size_in_bytes"]) - int(
        stats["alias_size_in_bytes"]
    )
    temp = int(stats["temp_size_in_bytes"])
    return state, temp, seconds


def sizes(state, temp, refused):
    """The state, temporaries and total cells. A compile libtpu refused names its temporaries;
    MaxText's log then has no state (None), stackscan's report takes it from the program."""
    temp_cell = ("does not fit: %.3f GiB" if refused else "%.3f GiB") % gib(temp)
    if state is None:
        return "—", temp_cell, "—"
    return "%.3f GiB" % gib(state), temp_cell, "%.3f GiB" % gib(state + temp)


print("| model | run | state / device | temp / device | total | compile |")
print("|---|---|---|---|---|---|")
for size in ("tiny", "full"):
    m = os.path.join(out, "maxtext-%s.log" % size)
    if os.path.exists(m) and (r := maxtext_row(m)):
        compile_s = "?" if r[2] is None else "%.0f s" % r[2]
        print("| %s | MaxText 0.2.5 default | %s | %s | %s | %s |"
              % ((size,) + sizes(r[0], r[1], r[0] is None) + (compile_s,)))
    for s in ("off", "on", "deferred", "off-u1", "deferred-u1"):
        p = os.path.join(out, "stackscan-%s-%s.json" % (size, s))
        if not os.path.exists(p):
            continue
        t = json.load(open(p))
        tpu = t["tpu"]
        state = tpu["arguments"] + tpu["outputs"] - tpu["alias"]
        cells = sizes(state, tpu["temp"], bool(tpu["out_of_memory"]))
        print("| %s | stackscan %s | %s | %s | %s | %.0f s |"
              % ((size, s) + cells + (t["xla_compile_seconds"],)))
