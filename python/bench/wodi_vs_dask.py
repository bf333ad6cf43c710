"""Empty-task throughput and round trip: `wodi.Pool.map` against Dask's
`client.map`, same number of worker processes on this machine.

    python python/bench/wodi_vs_dask.py wodi 4    # on a pool (carmi pool up --hosts 4)
    python python/bench/wodi_vs_dask.py dask 4    # a LocalCluster of 4 one-thread processes

Prints one JSON line: tasks, seconds for the map of `tasks` empty calls
(after a warm-up map that brings the workers up), its tasks per second, and
the median round trip of a one-item map over 20 tries.
"""

import json
import statistics
import sys
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


def main():
    which, workers = sys.argv[1], int(sys.argv[2])
    tasks = int(sys.argv[3]) if len(sys.argv) > 3 else 10_000
    if which == "wodi":
        with wodi.Pool(hosts=workers) as pool:
            seconds, trip = measure(lambda xs: pool.map(nothing, xs), tasks)
    else:
        from dask.distributed import Client, LocalCluster

        with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True) as cluster:
            with Client(cluster) as client:

                def run(xs):
                    return client.gather(client.map(nothing, list(xs), pure=False))

                seconds, trip = measure(run, tasks)
    print(json.dumps({"system": which, "workers": workers, "tasks": tasks,
                      "seconds": round(seconds, 3), "tasks_per_s": round(tasks / seconds),
                      "round_trip_ms": round(trip * 1000, 2)}))


if __name__ == "__main__":
    main()
