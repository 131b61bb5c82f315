#!/usr/bin/env python3
"""The most bytes live at once in a TPU program's temporaries, against the size of the
temporary allocation libtpu laid them out in.

libtpu writes its buffer assignment when `XLA_FLAGS=--xla_dump_to=DIR` is set: each value of
the temporary allocation with its offset and size (`*after_optimizations-buffer-assignment.txt`)
and each value's live range in the flattened schedule (`*after_optimizations-live-range.txt`).
The compiled memory statistics report the allocation's size; this reads how much of it is
occupied at the busiest point of the schedule (values sharing a buffer counted once), and
which values are live there.

    XLA_FLAGS=--xla_dump_to=dump stackscan compile-report --model llama --topology tpu7x:2x2x1
    python3 examples/tpu/live_peak.py dump
"""

import collections
import glob
import re
import sys


def one(pattern):
    files = glob.glob(pattern)
    if len(files) != 1:
        sys.exit(f"expected one file {pattern}, found {len(files)}")
    return open(files[0]).read().splitlines()


def live_ranges(lines):
    """Instruction names by position, and each value's [first, last] position."""
    sequence, ranges, section = {}, {}, None
    for line in lines:
        if "InstructionSequence" in line:
            section = "sequence"
        elif "BufferLiveRange" in line:
            section = "ranges"
        elif section == "sequence" and (m := re.match(r"\s+(\d+):(\S+)", line)):
            sequence[int(m[1])] = m[2]
        elif section == "ranges" and (m := re.match(r"\s+(\S+):(\d+)-(\d+)", line)):
            ranges[m[1]] = (int(m[2]), int(m[3]))
    return sequence, ranges


def temporaries(lines):
    """The largest temporary allocation's size and its values: (name, size, offset, shape)."""
    allocations, current = [], None
    for line in lines:
        if m := re.match(r"allocation \d+: size (\d+),.*preallocated-temp", line):
            current = (int(m[1]), [])
            allocations.append(current)
        elif line.startswith("allocation"):
            current = None
        elif current and (
            m := re.match(r" value: <\d+ (\S+) @\d+> \(size=(\d+),offset=(\d+)\): (.*)", line)
        ):
            current[1].append((m[1], int(m[2]), int(m[3]), m[4]))
    return max(allocations, key=lambda a: a[0])


def occupied(intervals):
    """Bytes covered by the union of `[start, end)` intervals."""
    total, start, end = 0, None, None
    for a, b in sorted(intervals):
        if end is None or a > end:
            total += 0 if end is None else end - start
            start, end = a, b
        else:
            end = max(end, b)
    return total + (0 if end is None else end - start)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    dump = sys.argv[1]
    sequence, ranges = live_ranges(one(f"{dump}/*after_optimizations-live-range.txt"))
    size, values = temporaries(one(f"{dump}/*after_optimizations-buffer-assignment.txt"))
    at = collections.defaultdict(list)
    for name, bytes_, offset, shape in values:
        first, last = ranges[name if "{" in name else name + "{}"]
        for t in range(first, last + 1):
            at[t].append((offset, offset + bytes_, name, shape))
    peak, t = max((occupied([(a, b) for a, b, _, _ in at[t]]), t) for t in at)
    mib = 1 << 20
    print(f"temporary allocation {size / mib:.1f} MiB; most live at once {peak / mib:.1f} MiB")
    print(f"at position {t} ({sequence.get(t, '?')}), the largest values live there:")
    for a, b, name, shape in sorted(at[t], key=lambda v: v[0] - v[1])[:12]:
        print(f"  {(b - a) / mib:8.2f} MiB  {name}  {shape[:60]}")


if __name__ == "__main__":
    main()
