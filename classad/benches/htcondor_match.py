#!/usr/bin/env python3
"""Does what `classad match` does, with HTCondor's own ClassAd library, for comparison.

Usage: htcondor_match.py --requirements EXPR FILE
Reads old-syntax machine ads separated by blank lines, evaluates EXPR with
MY = each ad, and prints `N of M ads match` plus the time spent parsing and
evaluating. Needs the `htcondor` wheel (pip install htcondor).
"""
import argparse
import time

import classad2
import htcondor2  # noqa: F401  (HTCondor's daemon semantics: bare names look in MY, then TARGET)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--requirements", required=True)
    ap.add_argument("file")
    args = ap.parse_args()

    with open(args.file) as f:
        chunks = [c for c in f.read().split("\n\n") if c.strip()]

    t0 = time.perf_counter()
    ads = [classad2.parseOne(c, classad2.ParserType.Old) for c in chunks]
    t1 = time.perf_counter()
    expr = classad2.ExprTree(args.requirements)
    matched = sum(1 for ad in ads if expr.eval(ad) is True)
    t2 = time.perf_counter()
    print(f"{matched} of {len(ads)} ads match")
    print(f"parse {t1 - t0:.3f}s ({len(ads) / (t1 - t0):,.0f} ads/s), "
          f"eval {t2 - t1:.3f}s ({len(ads) / (t2 - t1):,.0f} evals/s)")


if __name__ == "__main__":
    main()
