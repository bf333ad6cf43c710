"""Run by test_map.py: a materials-like cyclic workload, uneven steps, on a churning pool."""

import time

import wodi


def step(arg):
    cycle, i = arg
    time.sleep(0.01 * (1 + (i * 7) % 13))
    return (cycle, i, i * i + cycle)


with wodi.Pool(hosts=6) as pool:
    for cycle in range(8):
        out = pool.map(step, [(cycle, i) for i in range(31)])
        assert out == [(cycle, i, i * i + cycle) for i in range(31)], out
        print("cycle", cycle, "ok", flush=True)
print("delivered", pool.stats["steps_delivered"], "lost", pool.stats["hosts_lost"])
