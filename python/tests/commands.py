"""Run by test_more.py: workers that run a command instead of this script
(the shell worker, and a Python worker script with its init data)."""

import os
import sys

import wodi

with wodi.Pool(hosts=2, worker=wodi.SHELL) as pool:
    print("shell", pool.map(None, ["echo one", "expr 2 + 3", b"printf x"]))
    try:
        pool.map(None, ["echo fine", "echo broken >&2; exit 3"])
    except wodi.StepError as e:
        print("shell failed", e.index, e.item, "broken" in e.reason)

upper = [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "upper_worker.py")]
with wodi.Pool(hosts=2, worker=upper, init="PREFIX:") as pool:
    print("script", pool.map(None, ["a", "bc", b"d"]))
