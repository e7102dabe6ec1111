"""Joins the JSON files of sharded OpInfo sweeps (tests/test_gpu_opinfo.py, NVF_OPINFO_REPORT=...)
into one summary and one ops x dtypes table.

    python scripts/merge_opinfo.py shard*.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter

from tabulate import tabulate


def main(paths: list[str]) -> int:
    docs = [json.load(open(p)) for p in paths]
    if not docs:
        print("no OpInfo shard reports")
        return 1
    rows = sorted((r for d in docs for r in d["rows"]), key=lambda r: r[0])
    counts: Counter = Counter()
    for d in docs:
        counts.update(d["counts"])
    failures = [f for d in docs for f in d["failures"]]
    not_run = sum(d["not_run"] for d in docs)
    samples = sum(d["samples_run"] for d in docs)
    print(f"OpInfo sweep, {len(docs)} shards ({', '.join(d['shard'] for d in docs)}), "
          f"{docs[0]['samples_per_case']} sample(s) per op and dtype, budget {docs[0]['budget_s']:.0f} s per shard: "
          f"{len(rows)} ops run, {not_run} not run, {samples} samples; "
          + ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())) + f"; fail: {len(failures)}")
    print()
    print(tabulate(rows, headers=docs[0]["headers"], tablefmt="github"))
    print("\nfailures:" + ("" if failures else " none"))
    for op, dtype, detail in failures:
        print(f"- {op} {dtype}: {detail}")
    fallbacks = [f for d in docs for f in d.get("fallbacks", [])]
    print("\nfallbacks (planned for nvFuser, ran in eager):" + ("" if fallbacks else " none"))
    for op, dtype, detail in fallbacks:
        print(f"- {op} {dtype}: {detail}")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", help="the shards' JSON files (NVF_OPINFO_REPORT=PATH writes PATH.json)")
    sys.exit(main(parser.parse_args().paths))
