"""Run by test_map.py: steps that record their worker's pid (in the shared
working directory) and take a moment, so that the test can kill one."""

import os
import time

import wodi


def slow(x):
    os.makedirs("pids", exist_ok=True)
    open(os.path.join("pids", str(os.getpid())), "w").close()
    time.sleep(0.3)
    return x + 1


with wodi.Pool(hosts=3) as pool:
    ok = pool.map(slow, range(30)) == list(range(1, 31))
print("ok" if ok else "WRONG", pool.stats["steps_delivered"], pool.stats["step_copies"])
