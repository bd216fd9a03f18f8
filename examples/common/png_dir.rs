//! Writes real PNG textures (made with the `png` codec at start-up) and
//! materials that name them, for the asset demos; and decodes a PNG to
//! RGBA8 on the calling thread, as the streamer's `PngLoader` does, for
//! the sequential baseline. Each example uses some of it.
#![allow(dead_code)]

use std::io::Cursor;
use std::path::{Path, PathBuf};

/// One written texture.
pub struct TextureFile {
    pub name: PathBuf,
    /// RGBA8 bytes once decoded.
    pub decoded: u64,
    /// Bytes on disk.
    pub file: u64,
}

/// A texture's pixels: gradients, rings and a little noise (compresses like
/// painted textures do, 2-4x), tinted by `tint`.
pub fn texture_pixels(size: u32, seed: u64, tint: [u8; 3]) -> Vec<u8> {
    let mut noise = seed | 1;
    let mut out = Vec::with_capacity((size * size * 4) as usize);
    for y in 0..size {
        for x in 0..size {
            if x % 16 == 0 {
                noise ^= noise << 13;
                noise ^= noise >> 7;
                noise ^= noise << 17;
            }
            let (dx, dy) = (x as i64 - size as i64 / 2, y as i64 - size as i64 / 2);
            let ring = (((dx * dx + dy * dy) as f64).sqrt() as u32 / 8 % 2) as u8 * 40;
            let n = (noise >> (x % 53)) as u8 & 0x7;
            out.extend_from_slice(&[
                (x as u8 / 2).wrapping_add(tint[0]).wrapping_add(ring) ^ n,
                (y as u8 / 2).wrapping_add(tint[1]) ^ n,
                ((x + y) as u8 / 4).wrapping_add(tint[2]).wrapping_add(ring),
                255,
            ]);
        }
    }
    out
}

/// Encodes RGBA8 pixels as a PNG file.
pub fn encode_png(size: u32, rgba: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    {
        let mut encoder = png::Encoder::new(&mut out, size, size);
        encoder.set_color(png::ColorType::Rgba);
        encoder.set_depth(png::BitDepth::Eight);
        let mut writer = encoder.write_header().expect("PNG header");
        writer.write_image_data(rgba).expect("PNG data");
    }
    out
}

/// Writes `count` textures (256, 512 or 1024 pixels square) and
/// `materials` materials of two textures each under `dir`.
pub fn write_texture_dir(
    dir: &Path,
    count: usize,
    materials: usize,
) -> std::io::Result<(Vec<TextureFile>, Vec<PathBuf>)> {
    std::fs::create_dir_all(dir.join("textures"))?;
    std::fs::create_dir_all(dir.join("materials"))?;
    let mut textures = Vec::with_capacity(count);
    for i in 0..count {
        let size = [256, 512, 512, 1024][i % 4];
        let pixels = texture_pixels(size, i as u64 * 7919 + 1, [i as u8 * 13, 40, 90]);
        let png = encode_png(size, &pixels);
        let name = PathBuf::from(format!("textures/tex{i:03}.png"));
        std::fs::write(dir.join(&name), &png)?;
        textures.push(TextureFile {
            name,
            decoded: pixels.len() as u64,
            file: png.len() as u64,
        });
    }
    let mut mats = Vec::with_capacity(materials);
    for m in 0..materials {
        let a = &textures[(2 * m) % count].name;
        let b = &textures[(2 * m + 1) % count].name;
        let name = PathBuf::from(format!("materials/mat{m:02}.mat"));
        std::fs::write(
            dir.join(&name),
            format!("{}\n{}\n", a.display(), b.display()),
        )?;
        mats.push(name);
    }
    Ok((textures, mats))
}

/// Decodes a PNG to RGBA8 row by row with the `png` crate, as `PngLoader`
/// does.
pub fn decode_png_rows(bytes: Vec<u8>) -> Result<(u32, u32, Vec<u8>), png::DecodingError> {
    let mut decoder = png::Decoder::new(Cursor::new(bytes));
    decoder.set_transformations(png::Transformations::normalize_to_color8());
    let mut reader = decoder.read_info()?;
    let (width, height) = (reader.info().width, reader.info().height);
    let (color, _) = reader.output_color_type();
    let mut rgba = Vec::with_capacity(width as usize * height as usize * 4);
    while let Some(row) = reader.next_row()? {
        let row = row.data();
        match color {
            png::ColorType::Rgba => rgba.extend_from_slice(row),
            png::ColorType::Rgb => {
                for p in row.chunks_exact(3) {
                    rgba.extend_from_slice(&[p[0], p[1], p[2], 255]);
                }
            }
            png::ColorType::GrayscaleAlpha => {
                for p in row.chunks_exact(2) {
                    rgba.extend_from_slice(&[p[0], p[0], p[0], p[1]]);
                }
            }
            // `normalize_to_color8` expands palettes, so grey is left.
            _ => {
                for &g in row {
                    rgba.extend_from_slice(&[g, g, g, 255]);
                }
            }
        }
    }
    reader.finish()?;
    Ok((width, height, rgba))
}
