fn is_prime(n: u64) -> bool {
    n > 1 && (2..=n.isqrt()).all(|d| !n.is_multiple_of(d))
}

fn count_primes(block: u64) -> anyhow::Result<usize> {
    Ok((block * 1000..).take(1000).filter(|&n| is_prime(n)).count())
}

fn main() -> anyhow::Result<()> {
    wodi::serve(count_primes); // as a worker WoDi started: serve steps, then exit
    let mut pool = wodi::Pool::builder().hosts(4).start()?;
    let counts: Vec<usize> = pool.map(0..100)?; // one step per block, results in order
    println!("primes below 100,000: {}", counts.iter().sum::<usize>());
    let s = pool.close()?; // hosts go back; so short a run measures no efficiency
    println!("{} steps in {:.1} s", s.steps_delivered, s.execution_time_s);
    Ok(())
}
