"""Run by test_map.py: one cycle that succeeds, one with a step that raises."""

import wodi


def square(x):
    if x < 0:
        raise ValueError(f"no square for {x}")
    return x * x


with wodi.Pool(hosts=2) as pool:
    print("first", pool.map(square, [3, 1, 2]))
    try:
        pool.map(square, [1, -7, 2])
    except wodi.StepError as e:
        print("caught", e.index, e.item)
        print(e)
    print("after", pool.map(square, [5]))
