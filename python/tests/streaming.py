"""Run by test_more.py: init data in every worker, results streamed as they
come (longest first after the first cycle), a failure after the successes."""

import os
import time

import wodi


def scaled(x):
    time.sleep(0.02 * x)
    if x < 0:
        raise ValueError(f"negative {x}")
    return x * wodi.init_data()["factor"]


def wait_for_go(x):
    """The second step ends only once the master has seen the first's result."""
    if x == "first":
        return x
    for _ in range(1200):
        if os.path.exists("go"):
            return "went"
        time.sleep(0.1)
    return "timed out"


with wodi.Pool(hosts=3, init={"factor": 10}) as pool:
    print("map", pool.map(scaled, [1, 2, 3]))
    got = sorted(pool.map_unordered(scaled, range(12)))
    print("unordered", got == [(x, 10 * x) for x in range(12)])
    seen = []
    try:
        for item, result in pool.map_unordered(scaled, [3, -1, 5]):
            seen.append((item, result))
    except wodi.StepError as e:
        print("then failed", e.item, sorted(seen))
    # A loop left early: the next cycle starts clean.
    for item, result in pool.map_unordered(scaled, [4, 0, 8]):
        break
    print("after", pool.map(scaled, [7]))
    streamed = []
    for item, result in pool.map_unordered(wait_for_go, ["first", "second"]):
        streamed.append(result)
        if result == "first":
            open("go", "w").close()
    print("streamed", streamed)
print("delivered", pool.stats["steps_delivered"])
