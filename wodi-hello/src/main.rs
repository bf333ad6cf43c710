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
    println!("efficiency {:.0}%", pool.close()?.efficiency * 100.0);
    Ok(())
}
