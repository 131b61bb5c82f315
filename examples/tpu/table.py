"""Prints a Markdown table of `stackscan compile-report --topology ... --json` reports: HBM
per device against the chip's, the layer loops' gathers and reduce-scatters that overlap a
matrix product, and the compile time. One row per report file given."""

import json
import sys


def gib(n):
    return n / 2**30


def row(path):
    with open(path) as f:
        r = json.load(f)
    t = r["tpu"]
    gathers = [l["gathers"] for l in t["loops"]]
    scatters = [l["scatters"] for l in t["loops"]]
    fits = "fits" if t["headroom"] >= 0 else "over by %.1f GiB" % gib(-t["headroom"])
    name = path.rsplit("/", 1)[-1].removesuffix(".json")
    return "| %s | %s | %.1f + %.1f = %.1f GiB of %.1f (%s) | %d of %d | %d of %d | %.0f s |" % (
        name,
        t["topology"],
        gib(t["arguments"] + t["outputs"] - t["alias"]),
        gib(t["temp"]),
        gib(t["total"]),
        gib(t["hbm_bytes"]),
        fits,
        sum(g["overlapping"] for g in gathers),
        sum(g["count"] for g in gathers),
        sum(s["overlapping"] for s in scatters),
        sum(s["count"] for s in scatters),
        r["xla_compile_seconds"],
    )


print("| run | slice | HBM per device: state + temp | layer-loop gathers overlapping a product | reduce-scatters overlapping a product | compile |")
print("|---|---|---|---|---|---|")
for p in sys.argv[1:]:
    print(row(p))
