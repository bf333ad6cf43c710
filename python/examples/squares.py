import wodi


def square(x):
    return x * x


with wodi.Pool(hosts=4) as pool:
    squares = pool.map(square, range(1000))
print(sum(squares), f"from {pool.stats['steps_delivered']} steps")
