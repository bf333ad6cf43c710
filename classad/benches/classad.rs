//! Benchmarks for the numbers the issue sets targets for: class membership
//! evaluation, old-syntax parsing, and symmetric matchmaking.
//!
//! Run with `cargo bench -p classad`; results go to BENCHMARKS.md.

use std::hint::black_box;

use classad::{ClassAd, Evaluator, parse_expr, symmetric_match, synth};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

const ADS: u64 = 100_000;

fn machines() -> Vec<ClassAd> {
    (0..ADS)
        .map(|i| ClassAd::parse_old(&synth::machine_old_syntax(i)).expect("synthetic ad parses"))
        .collect()
}

fn class_membership(c: &mut Criterion) {
    let ads = machines();
    let class = parse_expr(r#"Arch == "X86_64" && OpSys == "LINUX" && Memory >= 2048"#)
        .expect("class expression parses");
    let mut g = c.benchmark_group("class_membership");
    g.throughput(Throughput::Elements(ADS));
    g.bench_function("100k_ads", |b| {
        b.iter(|| {
            let mut n = 0u32;
            for ad in &ads {
                n += Evaluator::new(Some(ad), None).eval_top(&class).is_true() as u32;
            }
            black_box(n)
        })
    });
    g.finish();
}

fn parse_old(c: &mut Criterion) {
    let texts: Vec<String> = (0..ADS).map(synth::machine_old_syntax).collect();
    let mut g = c.benchmark_group("parse_old_syntax");
    g.throughput(Throughput::Elements(ADS));
    g.sample_size(10);
    g.bench_function("100k_ads", |b| {
        b.iter(|| {
            for t in &texts {
                black_box(ClassAd::parse_old(t).expect("synthetic ad parses"));
            }
        })
    });
    g.finish();
}

fn matching(c: &mut Criterion) {
    let ads = machines();
    let job = ClassAd::parse(&synth::job_new_syntax(3)).expect("job parses");
    let mut g = c.benchmark_group("symmetric_match");
    g.throughput(Throughput::Elements(ADS));
    g.bench_function("job_vs_100k_machines", |b| {
        b.iter(|| {
            let mut n = 0u32;
            for ad in &ads {
                n += symmetric_match(&job, ad) as u32;
            }
            black_box(n)
        })
    });
    g.finish();
}

criterion_group!(benches, class_membership, parse_old, matching);
criterion_main!(benches);
