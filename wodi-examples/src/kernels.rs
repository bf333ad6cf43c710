//! The real work the examples' workers do: small, deterministic numeric
//! kernels whose results a test can check.

/// A small, fast, seedable generator (SplitMix64), used instead of `rand`
/// so that results stay the same whatever version of `rand` is in the tree:
/// the examples' checksums are part of their tests.
#[derive(Clone, Debug)]
pub struct SplitMix(u64);

impl SplitMix {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> SplitMix {
        SplitMix(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform real in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Monte Carlo for pi: how many of `samples` random points of the unit
/// square fall inside the quarter circle (seeded, so repeatable).
pub fn pi_hits(seed: u64, samples: u64) -> u64 {
    let mut rng = SplitMix::new(seed);
    let mut hits = 0;
    for _ in 0..samples {
        let x = rng.next_f64();
        let y = rng.next_f64();
        if x * x + y * y < 1.0 {
            hits += 1;
        }
    }
    hits
}

/// The part of the complex plane a Mandelbrot image shows.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct View {
    /// Real part at the left edge.
    pub re_min: f64,
    /// Imaginary part at the top edge.
    pub im_max: f64,
    /// Width of the view in the complex plane.
    pub span: f64,
}

impl Default for View {
    /// The whole set.
    fn default() -> View {
        View {
            re_min: -2.2,
            im_max: 1.25,
            span: 3.2,
        }
    }
}

/// Escape-time counts (0 = inside the set, else 1..=max_iter scaled to a
/// byte) of the `w` x `h` pixels whose top-left corner is (`x0`, `y0`) in an
/// image `width` pixels wide. Pixels inside the set cost `max_iter`
/// iterations each, so tiles over the set are much slower than the rest:
/// the uneven cost that makes ordering by history pay off.
pub fn mandelbrot_tile(
    view: View,
    width: u32,
    (x0, y0, w, h): (u32, u32, u32, u32),
    max_iter: u32,
) -> Vec<u8> {
    let scale = view.span / f64::from(width);
    let mut out = Vec::with_capacity((w * h) as usize);
    for y in y0..y0 + h {
        let ci = view.im_max - f64::from(y) * scale;
        for x in x0..x0 + w {
            let cr = view.re_min + f64::from(x) * scale;
            let (mut zr, mut zi) = (0.0f64, 0.0f64);
            let mut i = 0;
            while i < max_iter && zr * zr + zi * zi <= 4.0 {
                let t = zr * zr - zi * zi + cr;
                zi = 2.0 * zr * zi + ci;
                zr = t;
                i += 1;
            }
            out.push(if i >= max_iter {
                0
            } else {
                // Smooth-ish shading: early escapes dark, late ones bright.
                (1 + (i * 254) / max_iter) as u8
            });
        }
    }
    out
}

/// A colour for an escape value (0 = inside: black).
pub fn palette(v: u8) -> [u8; 3] {
    if v == 0 {
        return [0, 0, 0];
    }
    let t = f64::from(v) / 255.0;
    // A blue-to-gold ramp.
    let r = (9.0 * (1.0 - t) * t * t * t * 255.0) as u8;
    let g = (15.0 * (1.0 - t) * (1.0 - t) * t * t * 255.0) as u8;
    let b = (8.5 * (1.0 - t) * (1.0 - t) * (1.0 - t) * t * 255.0) as u8;
    [r, g, b]
}

/// FNV-1a over bytes: a checksum for results (not for security).
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for &b in bytes {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// One unit of the materials worker's numeric work: a few sweeps of power
/// iteration on a small symmetric matrix (the largest eigenvalue of a
/// tight-binding-like chain Hamiltonian for wave number `k`). Returns the
/// eigenvalue estimate, so the work cannot be optimized away and the
/// master gets a number it can check.
pub fn chain_eigen(k: f64, sweeps: u32) -> f64 {
    const N: usize = 24;
    let mut v = [1.0f64; N];
    let mut lambda = 0.0;
    for _ in 0..sweeps {
        let mut w = [0.0f64; N];
        for i in 0..N {
            let onsite = 2.0 + (k * i as f64).cos();
            let left = if i > 0 { v[i - 1] } else { v[N - 1] };
            let right = if i + 1 < N { v[i + 1] } else { v[0] };
            w[i] = onsite * v[i] - 0.5 * (left + right);
        }
        let norm = w.iter().map(|x| x * x).sum::<f64>().sqrt();
        lambda = norm / v.iter().map(|x| x * x).sum::<f64>().sqrt();
        for i in 0..N {
            v[i] = w[i] / norm;
        }
    }
    lambda
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pi_is_close_and_repeatable() {
        let n = 200_000;
        let hits = pi_hits(42, n);
        assert_eq!(hits, pi_hits(42, n));
        assert_ne!(hits, pi_hits(43, n));
        let pi = 4.0 * hits as f64 / n as f64;
        assert!((pi - std::f64::consts::PI).abs() < 0.02, "{pi}");
    }

    #[test]
    fn tiles_over_the_set_cost_more_and_are_black_inside() {
        let view = View::default();
        // The centre of the image lies inside the set, the corner far outside.
        let inside = mandelbrot_tile(view, 64, (30, 22, 4, 4), 200);
        let outside = mandelbrot_tile(view, 64, (0, 0, 4, 4), 200);
        assert!(inside.iter().all(|&v| v == 0));
        assert!(outside.iter().all(|&v| v > 0));
        assert_eq!(palette(0), [0, 0, 0]);
        // Tiles put together are the whole image.
        let whole = mandelbrot_tile(view, 8, (0, 0, 8, 8), 100);
        let mut parts = Vec::new();
        for y in 0..8 {
            parts.extend(mandelbrot_tile(view, 8, (0, y, 8, 1), 100));
        }
        assert_eq!(whole, parts);
    }

    #[test]
    fn eigenvalue_is_deterministic_and_in_range() {
        let a = chain_eigen(0.3, 200);
        assert_eq!(a, chain_eigen(0.3, 200));
        // Gershgorin: onsite in [1, 3], off-diagonal sum 1.
        assert!(a > 1.0 && a < 4.0, "{a}");
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
    }
}
