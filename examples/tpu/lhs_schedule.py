"""libtpu's own estimate of each loop body's schedule: how long its latency-hiding scheduler
thinks a body takes and how much of that is collective time it could not hide, with each
asynchronous collective's estimated start and done, from a compile dumped with

    stackscan compile-report --topology tpu7x:2x2x1 ... --dump DIR
    python3 examples/tpu/lhs_schedule.py DIR [LABEL]

`*.schedule.txt` (the scheduler's text proto: the module, then one `computation_schedules`
per scheduled computation with each instruction's estimated start and end in cycles and the
computation's `scheduler_statistics`) is read beside `*after_optimizations.txt`, whose
`while`/`conditional` instructions carry stackscan's loop labels (`stackscan_loop`). Without
LABEL it prints one line per scheduled computation; with LABEL, the bodies whose label
contains it also list their asynchronous collectives and matrix products in schedule order.
This is the compiler's cost model, not a measurement: `compile-report`'s spans and
`timeline --compiled` read the same schedule with stackscan's costs (docs/tpu.md)."""

import glob
import os
import re
import sys


def read_module(lines):
    """(computation id -> name, instruction id -> (name, opcode)) from the proto's
    `hlo_module`, and the index of the first `computation_schedules` line."""
    computations, instructions = {}, {}
    name = None
    pending = []
    inst = None
    for i, line in enumerate(lines):
        if line.startswith("computation_schedules {"):
            return computations, instructions, i
        if line.startswith("  computations {"):
            name, pending = None, []
        elif line.startswith("    name: "):
            name = line.split('"')[1]
        elif line.startswith("    id: "):
            computations[int(line.split(":")[1])] = name
        elif line.startswith("    instructions {"):
            inst = {}
        elif inst is not None and line.startswith("      name: "):
            inst["name"] = line.split('"')[1]
        elif inst is not None and line.startswith("      opcode: "):
            inst["opcode"] = line.split('"')[1]
        elif inst is not None and line.startswith("      id: "):
            instructions[int(line.split(":")[1])] = (inst.get("name"), inst.get("opcode"))
            inst = None
    return computations, instructions, len(lines)


def read_schedules(lines):
    """Each `computation_schedules`: its computation id, instructions as (id, start, end) in
    cycles, its statistics, and the cycles per microsecond."""
    schedules, current, inst = [], None, None
    for line in lines:
        if line.startswith("computation_schedules {"):
            current = {"id": None, "instructions": [], "stats": {}, "per_us": None}
            schedules.append(current)
        elif line.startswith("  computation_id: "):
            current["id"] = int(line.split(":")[1])
        elif line.startswith("  instructions {"):
            inst = {"start": 0.0, "end": 0.0}
            current["instructions"].append(inst)
        elif inst is not None and line.startswith("    id: "):
            inst["id"] = int(line.split(":")[1])
        elif inst is not None and line.startswith("    start_timestamp_cycles: "):
            inst["start"] = float(line.split(":")[1])
        elif inst is not None and line.startswith("    end_timestamp_cycles: "):
            inst["end"] = float(line.split(":")[1])
        elif line.startswith("  scheduler_statistics {"):
            inst = None
        elif inst is None and current is not None and re.match(r"    \w+: [\d.e+-]+$", line):
            key, value = line.strip().split(": ")
            current["stats"][key] = float(value)
        elif line.startswith("  cycles_per_microsecond: "):
            current["per_us"] = float(line.split(":")[1])
    return schedules


def labels_and_products(hlo):
    """stackscan's loop label of each body (or branch) computation, and the fusions whose
    computation holds a matrix product."""
    labels = {}
    for line in hlo.splitlines():
        if " while(" not in line and " conditional(" not in line:
            continue
        label = re.search(r'stackscan_loop="([^"]*)"', line)
        bodies = re.search(r"body=%?([\w.\-]+)", line) or re.search(
            r"branch_computations=\{([^}]*)\}", line
        )
        if label and bodies:
            # The dump writes the label's UTF-8 bytes as octal escapes (`\342\200\223`).
            text = label.group(1).encode("latin1").decode("unicode_escape")
            text = text.encode("latin1").decode("utf-8")
            names = [b.strip().lstrip("%") for b in bodies.group(1).split(",")]
            # A kept step's case runs its last branch; the others are never taken.
            for i, body in enumerate(names):
                last = i == len(names) - 1
                labels[body] = text if last else "%s (branch %d, not taken)" % (text, i)
    with_product, current = set(), None
    calls = {}
    for line in hlo.splitlines():
        head = re.match(r"^(?:ENTRY )?%?([\w.\-]+) ", line)
        if head and line.rstrip().endswith("{"):
            current = head.group(1)
        if " convolution(" in line or " dot(" in line:
            with_product.add(current)
        fusion = re.match(r"\s+(?:ROOT )?%?([\w.\-]+) = .* fusion\(.*calls=%?([\w.\-]+)", line)
        if fusion:
            calls[fusion.group(1)] = fusion.group(2)
    products = {f for f, c in calls.items() if c in with_product}
    return labels, products


def main():
    out = sys.argv[1]
    wanted = sys.argv[2] if len(sys.argv) > 2 else None
    (schedule,) = glob.glob(os.path.join(out, "*.schedule.txt"))[:1] or [None]
    hlo_files = glob.glob(os.path.join(out, "*after_optimizations.txt"))
    if schedule is None or not hlo_files:
        sys.exit("%s: no *.schedule.txt and *after_optimizations.txt (compile-report "
                 "--dump DIR writes both)" % out)
    lines = open(schedule).read().splitlines()
    computations, instructions, first = read_module(lines)
    labels, products = labels_and_products(open(hlo_files[0]).read())
    print("%-62s %12s %12s" % ("computation (stackscan's loop)", "libtpu µs", "not hidden"))
    for s in read_schedules(lines[first:]):
        name = computations.get(s["id"], "?")
        per_us = s["per_us"] or 1.0
        total = s["stats"].get("total_cycles", 0.0) / per_us
        wasted = s["stats"].get("total_wasted_cycles", 0.0) / per_us
        label = labels.get(name, "")
        print("%-62s %12.1f %12.1f" % ((label or name)[:62], total, wasted))
        if wanted is None or wanted not in label:
            continue
        for inst in s["instructions"]:
            iname, opcode = instructions.get(inst["id"], ("?", "?"))
            if opcode in ("async-start", "async-done") or iname in products:
                kind = "product" if iname in products else opcode
                print("    %10.1f %10.1f  %-12s %s"
                      % (inst["start"] / per_us, inst["end"] / per_us, kind, iname))


if __name__ == "__main__":
    main()
