//! Compares PNG decoders on the same images in one run: the `png` crate
//! row by row (as the streamer's `PngLoader` decodes, a few rows per
//! background step), the `png` crate a whole frame at once, and
//! `zune-png` (a whole image at once; it has no row-by-row API). Each
//! decodes to RGBA8 from memory on this thread; the order of the codecs
//! changes each round, and the median round is reported.
//!
//! `cargo run --release --example png_codecs -- --help` lists the flags.

#[path = "common/png_dir.rs"]
mod png_dir;

use clap::Parser;
use std::io::Cursor;
use std::time::{Duration, Instant};

/// Decodes the same PNGs with each codec and prints their speed.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Number of images (256, 512 or 1024 pixels square, as the streaming
    /// demo writes them).
    #[arg(long, default_value_t = 24)]
    images: usize,
    /// Rounds over all images per codec.
    #[arg(long, default_value_t = 7)]
    rounds: usize,
}

fn png_frame(bytes: &[u8]) -> Vec<u8> {
    let mut decoder = png::Decoder::new(Cursor::new(bytes));
    decoder.set_transformations(png::Transformations::normalize_to_color8());
    let mut reader = decoder.read_info().expect("a PNG");
    let mut buf = vec![0; reader.output_buffer_size().expect("fits")];
    let info = reader.next_frame(&mut buf).expect("decodes");
    buf.truncate(info.buffer_size());
    assert_eq!(
        info.color_type,
        png::ColorType::Rgba,
        "the demo writes RGBA"
    );
    buf
}

fn zune(bytes: &[u8]) -> Vec<u8> {
    let options = zune_png::zune_core::options::DecoderOptions::default()
        .png_set_add_alpha_channel(true)
        .png_set_strip_to_8bit(true);
    let mut decoder = zune_png::PngDecoder::new_with_options(bytes, options);
    decoder.decode_raw().expect("decodes")
}

fn png_rows(bytes: &[u8]) -> Vec<u8> {
    png_dir::decode_png_rows(bytes.to_vec()).expect("decodes").2
}

type Codec = (&'static str, fn(&[u8]) -> Vec<u8>);

fn main() {
    let args = Args::parse();
    if args.images == 0 || args.rounds == 0 {
        eprintln!("png_codecs: --images and --rounds must be above zero");
        std::process::exit(2);
    }
    let images: Vec<(Vec<u8>, Vec<u8>)> = (0..args.images)
        .map(|i| {
            let size = [256, 512, 512, 1024][i % 4];
            let pixels = png_dir::texture_pixels(size, i as u64 * 7919 + 1, [i as u8 * 13, 40, 90]);
            (png_dir::encode_png(size, &pixels), pixels)
        })
        .collect();
    let decoded: u64 = images.iter().map(|(_, p)| p.len() as u64).sum();
    let on_disk: u64 = images.iter().map(|(f, _)| f.len() as u64).sum();
    let codecs: [Codec; 3] = [
        ("png, row by row (PngLoader)", png_rows),
        ("png, whole frame", png_frame),
        ("zune-png, whole image", zune),
    ];
    // Every codec decodes every image to the same pixels.
    for (name, decode) in codecs {
        for (file, pixels) in &images {
            assert!(decode(file) == *pixels, "{name} decoded other pixels");
        }
    }
    let mut times = vec![Vec::new(); codecs.len()];
    for round in 0..args.rounds {
        for k in 0..codecs.len() {
            let c = (k + round) % codecs.len();
            let start = Instant::now();
            for (file, _) in &images {
                std::hint::black_box(codecs[c].1(std::hint::black_box(file)));
            }
            times[c].push(start.elapsed());
        }
    }
    println!(
        "{} images, {:.1} MB of PNG, {:.1} MB of RGBA8; median of {} rounds",
        images.len(),
        on_disk as f64 / 1e6,
        decoded as f64 / 1e6,
        args.rounds
    );
    let medians: Vec<Duration> = times
        .iter_mut()
        .map(|t| {
            t.sort_unstable();
            t[t.len() / 2]
        })
        .collect();
    for ((name, _), median) in codecs.iter().zip(&medians) {
        println!(
            "  {name:<30} {:8.2} ms  {:7.1} MB/s decoded  {:.2}x png row by row",
            median.as_secs_f64() * 1e3,
            decoded as f64 / 1e6 / median.as_secs_f64(),
            medians[0].as_secs_f64() / median.as_secs_f64(),
        );
    }
}
