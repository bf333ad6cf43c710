"""Empty-task throughput and round trip: `wodi.Pool.map` and
`wodi.Executor.map` against Dask's `client.map`, the same number of worker
processes on this machine, in one run.

    python python/bench/wodi_vs_dask.py all 4              # all three, alternated
    python python/bench/wodi_vs_dask.py all 4 10000 --rounds 3
    python python/bench/wodi_vs_dask.py pool 4             # one system: pool, executor or dask

WoDi's systems use the pool `carmi` finds (an embedded one started and
stopped around each when none is configured); Dask a LocalCluster of
one-thread processes. Each round starts each system, maps 100 calls to
bring its workers up, then times the map of `tasks` calls of a function
that returns its argument (results checked, in order), then the median
round trip of 20 one-item maps. Prints one JSON line per system and round,
then each system's median calls/s and WoDi's over Dask's.
"""

import argparse
import json
import statistics
import time

import wodi


def nothing(x):
    return x


def measure(map_one_cycle, tasks):
    map_one_cycle(range(100))  # warm-up: workers up, code loaded
    t0 = time.perf_counter()
    out = map_one_cycle(range(tasks))
    seconds = time.perf_counter() - t0
    assert out == list(range(tasks))
    trips = []
    for _ in range(20):
        t = time.perf_counter()
        assert map_one_cycle([1]) == [1]
        trips.append(time.perf_counter() - t)
    return seconds, statistics.median(trips)


def run(system, workers, tasks, prefetch):
    if system == "pool":
        with wodi.Pool(hosts=workers, prefetch=prefetch) as pool:
            return measure(lambda xs: pool.map(nothing, xs), tasks)
    if system == "executor":
        with wodi.Executor(max_workers=workers, prefetch=prefetch) as ex:
            return measure(lambda xs: list(ex.map(nothing, xs)), tasks)
    from dask.distributed import Client, LocalCluster

    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True) as cluster:
        with Client(cluster) as client:
            return measure(lambda xs: client.gather(client.map(nothing, list(xs), pure=False)), tasks)


def main():
    # A pool's workers run this script: serve before anything else.
    if wodi.started_as_worker():
        wodi.Pool()
    p = argparse.ArgumentParser()
    p.add_argument("system", choices=["all", "pool", "executor", "dask"])
    p.add_argument("workers", type=int)
    p.add_argument("tasks", type=int, nargs="?", default=10_000)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--prefetch", type=int, default=None,
                   help="WoDi's steps in hand per worker (default: the package's, adaptive)")
    a = p.parse_args()
    systems = ["pool", "executor", "dask"] if a.system == "all" else [a.system]
    rates = {s: [] for s in systems}
    for r in range(a.rounds):
        for system in systems:
            seconds, trip = run(system, a.workers, a.tasks, a.prefetch)
            rates[system].append(a.tasks / seconds)
            print(json.dumps({"system": system, "round": r + 1, "workers": a.workers,
                              "tasks": a.tasks, "seconds": round(seconds, 3),
                              "tasks_per_s": round(a.tasks / seconds),
                              "round_trip_ms": round(trip * 1000, 2)}), flush=True)
    medians = {s: statistics.median(v) for s, v in rates.items()}
    if "dask" in medians and len(medians) > 1:
        for s in ("pool", "executor"):
            print(f"{s}: median {medians[s]:,.0f} calls/s = {medians[s] / medians['dask']:.1f}x "
                  f"Dask's {medians['dask']:,.0f}")


if __name__ == "__main__":
    main()
