//! Writes a directory of real compressed asset files for the demos: mixed
//! sizes from 4 KiB to 1 MiB (log-uniform), with procedural content that
//! compresses like textures and meshes do (2-4x with LZ4).

use engine_tasks::assets::encode_asset;
use std::path::{Path, PathBuf};

/// One written asset.
pub struct AssetFile {
    pub name: PathBuf,
    pub bytes: u64,
}

/// Writes `count` assets under `dir` (created if needed) and returns them.
pub fn write_asset_dir(dir: &Path, count: usize) -> std::io::Result<Vec<AssetFile>> {
    std::fs::create_dir_all(dir)?;
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    (0..count)
        .map(|i| {
            // 4 KiB .. 1 MiB, log-uniform.
            let exponent = 12.0 + 8.0 * (next() % 1000) as f64 / 1000.0;
            let size = 2f64.powf(exponent) as usize;
            let data = procedural(size, next());
            let name = PathBuf::from(format!("pack{}/asset{i:04}.eta", i % 8));
            let path = dir.join(&name);
            std::fs::create_dir_all(path.parent().expect("has a parent"))?;
            std::fs::write(&path, encode_asset(&data))?;
            Ok(AssetFile {
                name,
                bytes: data.len() as u64,
            })
        })
        .collect()
}

/// Smooth gradients with a little noise: compressible, not trivially so.
fn procedural(size: usize, mut noise: u64) -> Vec<u8> {
    (0..size)
        .map(|i| {
            if i % 64 == 0 {
                noise ^= noise << 13;
                noise ^= noise >> 7;
                noise ^= noise << 17;
            }
            let x = (i % 256) as u8;
            let y = ((i / 256) % 256) as u8;
            x.wrapping_add(y / 2) ^ ((noise >> (i % 61)) as u8 & 0x3)
        })
        .collect()
}
