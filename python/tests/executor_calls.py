"""Run by test_executor.py: wodi.Executor as concurrent.futures users
drive it. Each check prints one line the test looks for."""

import asyncio
import concurrent.futures as cf
import os
import sys
import time
import traceback
from dataclasses import dataclass

import wodi

MASTER = os.getpid()


def square(x):
    return x * x


def where(x):
    return (x, os.getpid())


def fail(x):
    raise ValueError(f"no square for {x}")


def wait_for(name):
    """Runs until the master creates the file `name`."""
    for _ in range(6000):
        if os.path.exists(name):
            return "released"
        time.sleep(0.01)
    return "timed out"


def mark(name):
    """Leaves a file `name` behind: a call that ran."""
    open(name, "w").close()
    return name


def setup(tag):
    os.environ["WODI_TEST_TAG"] = tag


def read_init(_):
    return (wodi.init_data()["k"], os.environ.get("WODI_TEST_TAG"))


@dataclass
class Point:
    x: int
    y: int


def make_adder(k):
    def add(x):
        return (x + k, os.getpid())

    return add


with wodi.Executor(max_workers=3) as ex:
    # 1,000 futures, collected as they complete.
    futures = {ex.submit(square, i): i for i in range(1000)}
    seen = {}
    for f in cf.as_completed(futures, timeout=600):
        seen[futures[f]] = f.result()
    print("as_completed", len(seen), seen == {i: i * i for i in range(1000)}, flush=True)
    done, not_done = cf.wait([ex.submit(square, i) for i in range(20)], timeout=600)
    print("wait", len(done), len(not_done), flush=True)

    # A lambda, a closure, a class of this script: by value, run elsewhere.
    value, pid = ex.submit(lambda x: (x + 1, os.getpid()), 41).result()
    print("lambda", value, pid != MASTER, flush=True)
    value, pid = ex.submit(make_adder(100), 5).result()
    print("closure", value, pid != MASTER, flush=True)
    p = ex.submit(lambda q: Point(q.y, q.x), Point(1, 2)).result()
    print("class", p.x, p.y, flush=True)
    print("kwargs", ex.submit(int, "ff", base=16).result(), flush=True)

    # A call that raises: its exception here, the worker's traceback as cause.
    try:
        ex.submit(fail, -7).result()
    except ValueError as e:
        text = "".join(traceback.format_exception(type(e), e, e.__traceback__))
        cause = e.__cause__
        print("raised", e, type(cause).__name__, flush=True)
        print("remote frame", 'in fail' in cause.tb and 'raise ValueError' in cause.tb, flush=True)
        print("printed with cause", "no square for -7" in text and "in fail" in text, flush=True)

    # map: in order, several iterables, chunks, a failure where its result is.
    print("map", list(ex.map(square, range(10))), flush=True)
    print("map2", list(ex.map(pow, range(5), [3] * 5)), flush=True)
    print("chunks", list(ex.map(square, range(23), chunksize=5)) == [i * i for i in range(23)], flush=True)
    results = ex.map(lambda x: 10 // x, [5, 2, 0, 1])
    got = []
    try:
        for r in results:
            got.append(r)
    except ZeroDivisionError:
        print("map raised after", got, flush=True)

    # asyncio: run_in_executor and wrap_future.
    async def main():
        loop = asyncio.get_running_loop()
        many = await asyncio.gather(*(loop.run_in_executor(ex, square, i) for i in range(50)))
        one = await asyncio.wrap_future(ex.submit(square, 12))
        return many == [i * i for i in range(50)], one

    print("asyncio", *asyncio.run(main()), flush=True)

    # Distinct workers took part.
    pids = {pid for _, pid in ex.map(where, range(200))}
    print("workers", len(pids) >= 1 and MASTER not in pids, flush=True)

# Cancellation: one worker, one call handed to the pool at a time.
os.makedirs("marks", exist_ok=True)
ex = wodi.Executor(max_workers=1, window=1, prefetch=1, init={"k": 3}, initializer=setup,
                   initargs=("ready",))
print("init", *ex.submit(read_init, None).result(timeout=600), flush=True)
first = ex.submit(wait_for, "go")
while not first.running():
    time.sleep(0.01)
queued = [ex.submit(mark, os.path.join("marks", str(i))) for i in range(5)]
print("cancel running", first.cancel(), flush=True)
print("cancel queued", [f.cancel() for f in queued[:3]], flush=True)
open("go", "w").close()
print("first", first.result(timeout=600), flush=True)
print("rest", [f.result(timeout=600) for f in queued[3:]] == [os.path.join("marks", "3"), os.path.join("marks", "4")], flush=True)
print("cancelled", [f.cancelled() for f in queued], sorted(os.listdir("marks")), flush=True)

# A map whose iterator gives up (its timeout) cancels its calls not started.
os.remove("go")
blocker = ex.submit(wait_for, "go")
while not blocker.running():
    time.sleep(0.01)
it = ex.map(mark, [os.path.join("marks", f"map{i}") for i in range(3)], timeout=0.2)
try:
    next(it)
except cf.TimeoutError:
    print("gave up map", flush=True)
open("go", "w").close()
print("blocker", blocker.result(timeout=600), flush=True)

# shutdown(cancel_futures=True): calls not started are cancelled, the others finish.
os.remove("go")
slow = ex.submit(wait_for, "go")
while not slow.running():
    time.sleep(0.01)
later = [ex.submit(mark, os.path.join("marks", f"late{i}")) for i in range(3)]
ex.shutdown(wait=False, cancel_futures=True)
open("go", "w").close()
ex.shutdown(wait=True)
print("shutdown", slow.result(), [f.cancelled() for f in later], sorted(os.listdir("marks")), flush=True)
try:
    ex.submit(square, 1)
except RuntimeError as e:
    print("after shutdown", e, flush=True)
print("stats", ex.stats["steps_delivered"], flush=True)
print("stderr quiet", file=sys.stderr, flush=True)
