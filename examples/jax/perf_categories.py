"""Where a process's CPU time goes while it trains, from a `perf record` of it.

    python3 perf_categories.py MAPS PERF_DATA

MAPS is the process's /proc/PID/maps, read while it ran (JIT code has no symbols: its
mapping tells apart the code XLA compiles, mapped read + execute, from the kernels oneDNN
generates at run time, mapped read + write + execute). Prints one line per category, as a
share of the samples, then the commonest symbols left uncategorised. Used by profile.sh.
"""

import collections
import re
import subprocess
import sys

# (category, pattern on the symbol), first match wins.
BY_SYMBOL = [
    ("dot kernels", r"gemm|gebp|ynn|xnn_|dnnl|TensorContraction|DotThunk|matmul|MatMul"),
    ("collectives", r"AllGather|ReduceScatter|AllReduce|CollectivePermute|AllToAll|Rendezvous"),
    ("memcpy / memset", r"memmove|memcpy|memset"),
    ("allocator", r"malloc|free|_int_|unlink_chunk|consolidate"),
    ("runtime (thunks, threads)", r"Thunk|Executor|ThreadPool|EventCount|Mutex|Futex|AsyncValue"),
]
SAMPLE = re.compile(r"\s*(\S+)\s+([0-9a-f]+)\s+(.*?)\s+\((.*)\)\s*$")


def mappings(path):
    """(low, high, permissions) of each mapping in a maps file."""
    out = []
    for line in open(path):
        fields = line.split()
        low, high = (int(x, 16) for x in fields[0].split("-"))
        out.append((low, high, fields[1]))
    return out


def jit_category(address, maps):
    for low, high, perm in maps:
        if low <= address < high:
            if "w" in perm:
                return "dot kernels"  # oneDNN's generated sgemm, called from Eigen
            return "XLA's compiled code (fusions)"
    return "unattributed"


def main():
    maps = mappings(sys.argv[1])
    script = subprocess.run(
        ["perf", "script", "-i", sys.argv[2], "-F", "comm,ip,sym,dso"],
        capture_output=True, text=True, check=True,
    ).stdout
    counts, left = collections.Counter(), collections.Counter()
    total = 0
    for line in script.splitlines():
        m = SAMPLE.match(line)
        if not m:
            continue
        _, ip, sym, dso = m.groups()
        total += 1
        if "kernel" in dso:
            category = "kernel (context switches, page faults)"
        else:
            category = next((c for c, p in BY_SYMBOL if re.search(p, sym)), None)
        if category is None:
            if sym.startswith("[unknown]") or sym.startswith("0x") or "perf-" in dso:
                category = jit_category(int(ip, 16), maps)
            else:
                category = "other"
                left[(dso.rsplit("/", 1)[-1], sym[:70])] += 1
        counts[category] += 1
    print(f"samples {total}")
    for category, n in counts.most_common():
        print(f"{100 * n / total:5.1f} %  {category}")
    print("commonest other symbols:")
    for (dso, sym), n in left.most_common(8):
        print(f"{100 * n / total:5.2f} %  {dso}: {sym}")


if __name__ == "__main__":
    main()
