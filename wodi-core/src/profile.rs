//! Step-time profiles: the shape of real cycles, for the simulator, the
//! examples and the tests.
//!
//! [`materials`] is our stand-in for the materials-science application of the
//! CARMI/WoDi paper (its Section 4 and Figure 6): 31 steps per cycle whose
//! times differ a lot from step to step (a few take close to six minutes, many
//! under two) but little from cycle to cycle (a standard deviation of about 4%
//! of the mean). The paper gives the shape, not the numbers; ours are chosen so
//! that the totals agree with what it reports: about 90 minutes of CPU per
//! cycle (53 hours over 35 cycles, its Table 1) and a longest step near
//! 90/16 minutes, so that, as in its Figures 7 and 8, more than about 16
//! identical hosts stop shortening a cycle. In submission order the long steps
//! come late, as in an application that walks its problem from small cases to
//! large ones; that is what makes ordering by history pay off (its Table 1).

use rand::Rng;

/// One step of a cycle on a host of speed 1.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepProfile {
    /// Mean compute time, seconds.
    pub mean: f64,
    /// Standard deviation across cycles, seconds.
    pub std_dev: f64,
}

/// Mean step times of [`materials`] in minutes, in submission order.
const MATERIALS_MINUTES: [f64; 31] = [
    1.4, 1.5, 1.6, 1.5, 1.7, 1.6, 1.8, 1.7, 2.0, 1.9, 2.2, 1.8, 1.9, 2.4, 2.1, 2.7, 2.3, 3.0, 2.5,
    3.4, 2.9, 3.9, 3.2, 4.6, 3.6, 5.0, 4.2, 5.3, 4.8, 5.5, 5.7,
];

/// Spread of each step across cycles, as a fraction of its mean.
const MATERIALS_SPREAD: f64 = 0.04;

/// The materials-science cycle (31 steps), in seconds of compute on a speed-1
/// host, in submission order. Multiply by a scale to shrink a run.
pub fn materials() -> Vec<StepProfile> {
    MATERIALS_MINUTES
        .iter()
        .map(|m| StepProfile {
            mean: m * 60.0,
            std_dev: m * 60.0 * MATERIALS_SPREAD,
        })
        .collect()
}

/// Total mean compute of one cycle of [`materials`], seconds: the other
/// profiles carry the same work, so that runs compare on their shape alone.
fn materials_total() -> f64 {
    MATERIALS_MINUTES.iter().sum::<f64>() * 60.0
}

/// A cycle of `n` equal steps with the materials cycle's total work and
/// spread: the shape on which packing has least to gain (every step fits
/// anywhere) and a host idles in the tail only for the remainder of `n`
/// over the host count.
pub fn uniform(n: usize) -> Vec<StepProfile> {
    let mean = materials_total() / n.max(1) as f64;
    vec![
        StepProfile {
            mean,
            std_dev: mean * MATERIALS_SPREAD,
        };
        n
    ]
}

/// A cycle of `n` steps whose times follow a Pareto law of index 1.5 (a
/// heavy tail: most steps short, the longest about 10 times the median and 3 times the materials cycle's longest),
/// with the materials cycle's total work and spread, submitted shortest
/// first. Step `i` takes the law's quantile at `(i + 0.5) / n`, so the
/// profile is the same on every call. The longest step sets the cycle's
/// time, and the short ones must be packed around it.
pub fn heavy_tail(n: usize) -> Vec<StepProfile> {
    let n = n.max(1);
    let raw: Vec<f64> = (0..n)
        .map(|i| (1.0 - (i as f64 + 0.5) / n as f64).powf(-1.0 / 1.5))
        .collect();
    let scale = materials_total() / raw.iter().sum::<f64>();
    raw.into_iter()
        .map(|r| StepProfile {
            mean: r * scale,
            std_dev: r * scale * MATERIALS_SPREAD,
        })
        .collect()
}

/// The profile with every time multiplied by `factor` (e.g. 1/300 to run a
/// five-hour job in a minute).
pub fn scaled(profile: &[StepProfile], factor: f64) -> Vec<StepProfile> {
    profile
        .iter()
        .map(|s| StepProfile {
            mean: s.mean * factor,
            std_dev: s.std_dev * factor,
        })
        .collect()
}

/// One cycle's actual step times: each step's mean plus normal noise of its
/// standard deviation, never below a tenth of the mean.
pub fn sample_cycle(profile: &[StepProfile], rng: &mut impl Rng) -> Vec<f64> {
    profile
        .iter()
        .map(|s| (s.mean + s.std_dev * standard_normal(rng)).max(s.mean * 0.1))
        .collect()
}

/// A standard normal deviate (Box-Muller), so that no distribution crate is needed.
fn standard_normal(rng: &mut impl Rng) -> f64 {
    let u1: f64 = rng.random_range(f64::MIN_POSITIVE..1.0);
    let u2: f64 = rng.random();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use super::*;
    use crate::plan::{fewest_hosts, lower_bound};

    #[test]
    fn materials_has_the_papers_totals() {
        let p = materials();
        assert_eq!(p.len(), 31);
        let total: f64 = p.iter().map(|s| s.mean).sum();
        let longest = p.iter().map(|s| s.mean).fold(0.0, f64::max);
        // About 90 CPU minutes per cycle, 35 cycles near the paper's 53 hours.
        assert!((85.0 * 60.0..95.0 * 60.0).contains(&total), "{total}");
        assert!((50.0..56.0).contains(&(total * 35.0 / 3600.0)));
        // Beyond about 16 identical hosts a cycle gets no shorter.
        let means: Vec<f64> = p.iter().map(|s| s.mean).collect();
        let k = fewest_hosts(&means, &[1.0; 40], 0.05);
        assert!((15..=19).contains(&k), "fewest hosts {k}");
        assert_eq!(lower_bound(&means, &[1.0; 40]), longest);
        // Long steps come late in submission order.
        let first_half: f64 = means[..15].iter().sum();
        let second_half: f64 = means[16..].iter().sum();
        assert!(second_half > 2.0 * first_half);
    }

    #[test]
    fn the_other_profiles_carry_the_materials_work_in_their_own_shape() {
        let total = |p: &[StepProfile]| p.iter().map(|s| s.mean).sum::<f64>();
        let longest = |p: &[StepProfile]| p.iter().map(|s| s.mean).fold(0.0, f64::max);
        let m = materials();
        let u = uniform(31);
        let h = heavy_tail(31);
        assert_eq!((u.len(), h.len()), (31, 31));
        assert!((total(&u) - total(&m)).abs() < 1e-6);
        assert!((total(&h) - total(&m)).abs() < 1e-6);
        assert_eq!(longest(&u), u[0].mean);
        // The heavy tail's longest step is far above its median and above
        // the materials cycle's longest.
        let mut means: Vec<f64> = h.iter().map(|s| s.mean).collect();
        means.sort_by(f64::total_cmp);
        assert!(means[30] > 8.0 * means[15], "{means:?}");
        assert!(means[30] > 3.0 * longest(&m));
        assert!(h.windows(2).all(|w| w[0].mean <= w[1].mean));
    }

    #[test]
    fn samples_vary_a_little_around_the_mean_and_repeat_for_a_seed() {
        let p = materials();
        let mut a = StdRng::seed_from_u64(5);
        let mut b = StdRng::seed_from_u64(5);
        let cycles: Vec<Vec<f64>> = (0..200).map(|_| sample_cycle(&p, &mut a)).collect();
        assert_eq!(cycles[0], sample_cycle(&p, &mut b));
        for (i, s) in p.iter().enumerate() {
            let xs: Vec<f64> = cycles.iter().map(|c| c[i]).collect();
            let mean = xs.iter().sum::<f64>() / xs.len() as f64;
            let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / xs.len() as f64;
            assert!(
                (mean - s.mean).abs() < s.mean * 0.01,
                "step {i}: mean {mean}"
            );
            let sd = var.sqrt();
            assert!(
                (sd - s.std_dev).abs() < s.std_dev * 0.25,
                "step {i}: sd {sd}"
            );
        }
        let small = scaled(&p, 0.5);
        assert_eq!(small[3].mean, p[3].mean * 0.5);
    }
}
