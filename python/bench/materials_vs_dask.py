"""Issue 17, item 5b: the materials-like cyclic workload (31 uneven steps a
cycle) on hosts of different speeds, `wodi.Pool.map` against Dask's
`client.map`, the same number of worker processes on this machine.

    carmi pool up --hosts 4
    python python/bench/materials_vs_dask.py 4 --cycles 10 --scale 0.002
    carmi pool down

Runs WoDi first, then Dask, and prints one JSON line per system.

The step times are the materials profile of `wodi-core/src/profile.rs`
(its minutes, a 4 % spread across cycles), multiplied by `--scale` and drawn
once by the master from a fixed seed, so both systems get the same steps.
A step sleeps its time divided by its worker's speed (sleeping, not
computing, so that the 2-core machine's load does not decide the result).
The speeds: a WoDi worker reads `Speed` from its host's machine ad
(`CARMI_MACHINE_AD`; the embedded pool gives its hosts speeds between 0.5
and 2); Dask's worker `k` gets the speed of the `k`-th WoDi worker, so both
run on the same set of speeds. Neither is told the speeds: WoDi learns them
from observed step times, Dask does not use them.

Run length: from the first cycle's `map` to the last one's results (pool
start-up excluded). Efficiency: the steps' sleep time over workers x run
length (the paper's busy time over occupancy, measured the same way for
both); WoDi's own `efficiency` statistic is printed beside it.
"""

import argparse
import json
import os
import random
import time

import wodi

# Mean step times of the materials cycle, minutes on a speed-1 host, in
# submission order (wodi-core/src/profile.rs, MATERIALS_MINUTES).
MINUTES = [
    1.4, 1.5, 1.6, 1.5, 1.7, 1.6, 1.8, 1.7, 2.0, 1.9, 2.2, 1.8, 1.9, 2.4, 2.1, 2.7, 2.3, 3.0, 2.5,
    3.4, 2.9, 3.9, 3.2, 4.6, 3.6, 5.0, 4.2, 5.3, 4.8, 5.5, 5.7,
]
SPREAD = 0.04


def host_ad():
    """This host's name and `Speed` from its machine ad (the pid and 1.0
    without one)."""
    name, speed = str(os.getpid()), 1.0
    try:
        with open(os.environ["CARMI_MACHINE_AD"]) as f:
            for line in f:
                key, _, value = line.partition("=")
                value = value.strip().rstrip(";").strip()
                if key.strip().lower() == "speed":
                    speed = float(value)
                elif key.strip().lower() == "name":
                    name = value.strip('"')
    except (KeyError, OSError, ValueError):
        pass
    return name, speed


def work(seconds, host, speed):
    took = seconds / speed
    time.sleep(took)
    return {"host": host, "speed": speed, "busy": took}


def wodi_step(seconds):
    return work(seconds, *host_ad())


def dask_step(arg):
    from distributed import get_worker

    seconds, speeds = arg
    k = int(get_worker().name)
    return work(seconds, k, speeds[k % len(speeds)])


def draw_cycles(cycles, scale, seed):
    rng = random.Random(seed)
    return [
        [max(m * 60 * scale * (1 + SPREAD * rng.gauss(0, 1)), m * 6 * scale) for m in MINUTES]
        for _ in range(cycles)
    ]


def summary(system, workers, walls, outs, extra):
    run = sum(walls)
    busy = sum(r["busy"] for out in outs for r in out)
    return dict(
        system=system,
        workers=workers,
        cycles=len(walls),
        run_s=round(run, 2),
        mean_cycle_s=round(run / len(walls), 3),
        last_cycles_s=[round(w, 3) for w in walls[-3:]],
        efficiency=round(busy / (workers * run), 3),
        **extra,
    )


def run_wodi(workers, cycles):
    walls, outs = [], []
    with wodi.Pool(hosts=workers) as pool:
        for steps in cycles:
            t0 = time.perf_counter()
            outs.append(pool.map(wodi_step, steps))
            walls.append(time.perf_counter() - t0)
    speed_of = {}
    for out in outs:
        for r in out:
            speed_of.setdefault(r["host"], r["speed"])
    speeds = list(speed_of.values())
    extra = dict(speeds=speeds, wodi_efficiency=round(pool.stats["efficiency"], 3),
                 hosts_added=pool.stats["hosts_added"], hosts_lost=pool.stats["hosts_lost"])
    return summary("wodi", workers, walls, outs, extra), speeds


def run_dask(workers, cycles, speeds):
    from distributed import Client, LocalCluster

    walls, outs = [], []
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True) as cluster:
        with Client(cluster) as client:
            client.wait_for_workers(workers)
            for steps in cycles:
                t0 = time.perf_counter()
                futures = client.map(dask_step, [(s, speeds) for s in steps], pure=False)
                outs.append(client.gather(futures))
                walls.append(time.perf_counter() - t0)
    return summary("dask", workers, walls, outs, dict(speeds=speeds))


def lower_bound(cycles, speeds):
    """A cycle can end no sooner than its longest step on the fastest
    host, nor before all its work spread perfectly over all speeds."""
    total = 0.0
    for steps in cycles:
        total += max(max(steps) / max(speeds), sum(steps) / sum(speeds))
    return round(total, 2)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("workers", type=int)
    p.add_argument("--cycles", type=int, default=10)
    p.add_argument("--scale", type=float, default=0.002)
    p.add_argument("--seed", type=int, default=17)
    p.add_argument("--only", choices=["wodi", "dask"])
    p.add_argument("--speeds", help="Dask's worker speeds when WoDi is not run, e.g. 1.8,1,0.7,0.5")
    a = p.parse_args()
    cycles = draw_cycles(a.cycles, a.scale, a.seed)
    speeds = [float(s) for s in a.speeds.split(",")] if a.speeds else None
    if a.only != "dask":
        result, speeds = run_wodi(a.workers, cycles)
        result["lower_bound_s"] = lower_bound(cycles, speeds)
        print(json.dumps(result), flush=True)
    if a.only != "wodi":
        speeds = speeds or [1.0] * a.workers
        result = run_dask(a.workers, cycles, speeds[: a.workers])
        result["lower_bound_s"] = lower_bound(cycles, speeds[: a.workers])
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
