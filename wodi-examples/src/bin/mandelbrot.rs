//! A visible result: a Mandelbrot image computed tile by tile by WoDi
//! workers and written as a PNG. Tiles over the set cost far more than the
//! others (every pixel runs all its iterations), so tile costs are uneven,
//! the case where dispatch order matters. The image is deterministic: the
//! program prints its size and an FNV-1a checksum of its escape values,
//! which are the same for the same arguments on any pool.

use std::path::PathBuf;

use clap::Parser;
use wodi::StepId;
use wodi::master::{Master, StepOutcome};
use wodi_examples::{Embedded, PoolArgs, RunPool, kernels};

/// Renders the Mandelbrot set on WoDi workers.
#[derive(Parser, Debug)]
#[command(name = "mandelbrot", version)]
struct Args {
    /// Image width in pixels.
    #[arg(long, default_value_t = 800)]
    width: u32,
    /// Image height in pixels.
    #[arg(long, default_value_t = 625)]
    height: u32,
    /// Tile side in pixels.
    #[arg(long, default_value_t = 64)]
    tile: u32,
    /// Iterations before a point counts as inside the set.
    #[arg(long, default_value_t = 2000)]
    max_iter: u32,
    /// Workers to ask for (and hosts of the embedded pool).
    #[arg(long, default_value_t = 4)]
    hosts: u32,
    /// Where to write the image.
    #[arg(long, default_value = "mandelbrot.png")]
    out: PathBuf,
    /// Where to run (default: an embedded pool).
    #[command(flatten)]
    pool: PoolArgs,
}

/// A tile to compute: image width, (x, y, w, h), iterations.
type Tile = (u32, (u32, u32, u32, u32), u32);

fn main() -> anyhow::Result<()> {
    wodi::enter();
    if wodi::worker::started_as_worker() {
        return wodi::worker::Worker::new()
            .on_step(|_, (width, rect, max_iter): Tile| {
                Ok(kernels::mandelbrot_tile(
                    kernels::View::default(),
                    width,
                    rect,
                    max_iter,
                ))
            })
            .run();
    }
    let args = Args::parse();
    anyhow::ensure!(
        args.width > 0 && args.height > 0 && args.tile > 0,
        "sizes must be positive"
    );
    let embedded = Embedded::idle(args.hosts as usize);
    let (values, stats) =
        wodi_examples::run_on_pool(&args.pool, embedded, async |pool| render(&args, pool).await)?;
    write_png(&args, &values)?;
    println!(
        "{}x{} image, checksum {:016x}, {} tiles in {:.1} s -> {}",
        args.width,
        args.height,
        kernels::fnv1a(&values),
        stats.steps_delivered,
        stats.execution_time_s,
        args.out.display()
    );
    Ok(())
}

/// Computes every tile; returns the escape values in row order.
async fn render(args: &Args, pool: &RunPool) -> anyhow::Result<(Vec<u8>, wodi::Stats)> {
    let mut master = Master::init(pool.master_config(args.hosts)?, &()).await?;
    let mut tiles = Vec::new();
    for y in (0..args.height).step_by(args.tile as usize) {
        for x in (0..args.width).step_by(args.tile as usize) {
            let rect = (
                x,
                y,
                args.tile.min(args.width - x),
                args.tile.min(args.height - y),
            );
            master.send_work(
                StepId(tiles.len() as u64),
                &(args.width, rect, args.max_iter),
            )?;
            tiles.push(rect);
        }
    }
    let mut values = vec![0u8; (args.width * args.height) as usize];
    for _ in 0..tiles.len() {
        match master.recv_result::<Vec<u8>>().await? {
            StepOutcome::Done(step, v) => {
                let (x, y, w, h) = tiles[step.0 as usize];
                anyhow::ensure!(
                    v.len() == (w * h) as usize,
                    "tile {step}: {} values",
                    v.len()
                );
                for row in 0..h {
                    let at = ((y + row) * args.width + x) as usize;
                    values[at..at + w as usize]
                        .copy_from_slice(&v[(row * w) as usize..((row + 1) * w) as usize]);
                }
            }
            StepOutcome::Failed(step, why) => anyhow::bail!("tile {step} failed: {why}"),
        }
    }
    let stats = master.complete().await?;
    Ok((values, stats))
}

fn write_png(args: &Args, values: &[u8]) -> anyhow::Result<()> {
    let file = std::fs::File::create(&args.out)
        .map_err(|e| anyhow::anyhow!("{}: {e}", args.out.display()))?;
    let mut enc = png::Encoder::new(std::io::BufWriter::new(file), args.width, args.height);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let rgb: Vec<u8> = values.iter().flat_map(|&v| kernels::palette(v)).collect();
    enc.write_header()?.write_image_data(&rgb)?;
    Ok(())
}
