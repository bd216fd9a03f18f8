//! The asset container `ETA1`: a 12-byte header (magic, decoded size) and
//! an LZ4 frame with a content checksum, decoded in steps of
//! [`DECODE_STEP`] bytes so that a large asset becomes many short
//! background tasks.

use std::io::{self, Read, Write};

/// First bytes of an asset file.
pub const ASSET_MAGIC: [u8; 4] = *b"ETA1";
/// Header: magic, then the decoded size as a little-endian `u64`.
const HEADER_LEN: usize = 12;
/// Decoded bytes per background task: small enough that one step is
/// short, so a frame-critical task never waits long for a worker that is
/// decoding.
pub const DECODE_STEP: usize = 128 * 1024;
/// Largest decoded asset accepted (a corrupt size field must not make the
/// decoder reserve gigabytes).
pub const MAX_ASSET_SIZE: u64 = 1 << 30;
/// The most a decoder reserves before decoding, whatever the header
/// declares: beyond it the output grows as it is really decoded.
const MAX_RESERVE: u64 = 16 << 20;
/// The most an LZ4 stream can expand: a match's length grows by at most
/// 255 per byte of the stream (the LZ4 block format's length bytes).
const LZ4_MAX_RATIO: u64 = 255;

/// Encodes `data` as an asset file: header plus an LZ4 frame with a
/// content checksum.
///
/// ```
/// use engine_tasks::assets::{decode_asset, encode_asset, ASSET_MAGIC};
///
/// let heightmap = vec![7u8; 64 * 1024]; // flat terrain compresses well
/// let file = encode_asset(&heightmap);
/// assert!(file.starts_with(&ASSET_MAGIC));
/// assert!(file.len() < heightmap.len() / 10);
/// assert_eq!(decode_asset(&file).unwrap(), heightmap);
/// ```
pub fn encode_asset(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + data.len() / 2);
    out.extend_from_slice(&ASSET_MAGIC);
    out.extend_from_slice(&(data.len() as u64).to_le_bytes());
    let mut info = lz4_flex::frame::FrameInfo::new();
    info.content_checksum = true;
    // 64 KiB blocks: the decoder's block buffer is this size, and with the
    // default ("auto": the size of the first write, up to 4 MiB) every
    // decode of a large asset zeroed a fresh multi-megabyte buffer, which
    // cost more than the decompression itself.
    info.block_size = lz4_flex::frame::BlockSize::Max64KB;
    let mut encoder = lz4_flex::frame::FrameEncoder::with_frame_info(info, out);
    encoder
        .write_all(data)
        .expect("writing to a Vec cannot fail");
    encoder.finish().expect("finishing into a Vec cannot fail")
}

/// Decodes an asset file made by [`encode_asset`], checking the header, the
/// LZ4 frame's checksum and the decoded size.
///
/// ```
/// use engine_tasks::assets::{decode_asset, encode_asset};
///
/// let mut file = encode_asset(b"sword.mesh");
/// assert_eq!(decode_asset(&file).unwrap(), b"sword.mesh");
///
/// // A download cut short is caught, not decoded into garbage.
/// file.truncate(file.len() - 4);
/// assert!(decode_asset(&file).is_err());
/// assert!(decode_asset(b"not an asset").is_err());
/// ```
pub fn decode_asset(file: &[u8]) -> Result<Vec<u8>, String> {
    let mut decoder = AssetDecoder::new(file)?;
    while !decoder.step(usize::MAX)? {}
    Ok(decoder.into_data())
}

/// Decodes an asset file a slice at a time, so that a large asset becomes
/// many short background tasks instead of one long one.
///
/// ```
/// use engine_tasks::assets::{encode_asset, AssetDecoder, DECODE_STEP};
///
/// let texture = vec![0x80u8; 3 * DECODE_STEP / 2];
/// let mut decoder = AssetDecoder::new(encode_asset(&texture)).unwrap();
/// let mut steps = 1;
/// // One step per task; spawn the next instead of looping in one task.
/// while !decoder.step(DECODE_STEP).unwrap() {
///     steps += 1;
/// }
/// assert_eq!(steps, 2);
/// assert_eq!(decoder.into_data(), texture);
/// ```
pub struct AssetDecoder<R: AsRef<[u8]>> {
    frame: lz4_flex::frame::FrameDecoder<io::Cursor<R>>,
    data: Vec<u8>,
    size: u64,
}

impl<R: AsRef<[u8]>> AssetDecoder<R> {
    /// Checks the header and prepares to decode.
    pub fn new(file: R) -> Result<Self, String> {
        let bytes = file.as_ref();
        if bytes.len() < HEADER_LEN || bytes[..4] != ASSET_MAGIC {
            return Err("not an asset file (bad magic)".into());
        }
        let size = u64::from_le_bytes(bytes[4..HEADER_LEN].try_into().expect("8 bytes"));
        if size > MAX_ASSET_SIZE {
            return Err(format!("declared size {size} exceeds {MAX_ASSET_SIZE}"));
        }
        // The declared size is the file's word, not a fact: a file of a
        // few bytes may declare a gigabyte. Reserve no more than its stream
        // can expand to, nor than `MAX_RESERVE`; `step` grows the rest.
        let plausible = ((bytes.len() - HEADER_LEN) as u64).saturating_mul(LZ4_MAX_RATIO);
        let reserve = size.min(plausible).min(MAX_RESERVE);
        let mut cursor = io::Cursor::new(file);
        cursor.set_position(HEADER_LEN as u64);
        Ok(AssetDecoder {
            frame: lz4_flex::frame::FrameDecoder::new(cursor),
            // One spare byte: `step` reads one past the end to find it.
            data: Vec::with_capacity(reserve as usize + 1),
            size,
        })
    }

    /// Decodes up to `budget` more bytes. `Ok(true)` once the whole frame is
    /// decoded and checked.
    pub fn step(&mut self, budget: usize) -> Result<bool, String> {
        let start = self.data.len();
        let room = (self.size as usize).saturating_sub(start);
        // One byte past the declared size, to notice data that runs over.
        let want = budget.max(1).min(room + 1);
        let end = start + want;
        let mut len = start;
        while len < end {
            // Zero at most a step's bytes ahead of what is decoded: a header
            // that overstates the size costs no more than that.
            let ahead = (end - len).min(DECODE_STEP);
            let needed = len + ahead;
            if self.data.capacity() < needed {
                // Double, but never past the declared size and its spare
                // byte (`needed` never is): a true header ends with an
                // exact buffer, a false one with no more than came.
                let target = (self.data.capacity() * 2)
                    .min(self.size as usize + 1)
                    .max(needed);
                self.data.reserve_exact(target - self.data.len());
            }
            if self.data.len() < needed {
                self.data.resize(needed, 0);
            }
            match self.frame.read(&mut self.data[len..len + ahead]) {
                Ok(0) => {
                    // The frame ended; its checksum was checked on the way.
                    self.data.truncate(len);
                    if self.data.len() as u64 != self.size {
                        let (got, size) = (self.data.len(), self.size);
                        return Err(format!("decoded {got} bytes, header says {size}"));
                    }
                    // The decoder stops at the end of the frame: anything
                    // after it is not part of the asset.
                    let cursor = self.frame.get_ref();
                    let read = cursor.position();
                    let total = cursor.get_ref().as_ref().len() as u64;
                    if read != total {
                        return Err(format!("{} bytes after the LZ4 frame", total - read));
                    }
                    return Ok(true);
                }
                Ok(n) => len += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("LZ4 frame: {e}")),
            }
        }
        debug_assert_eq!(self.data.len(), end);
        if self.data.len() as u64 > self.size {
            return Err(format!("more than the {} bytes the header says", self.size));
        }
        Ok(false)
    }

    /// The decoded bytes.
    pub fn into_data(self) -> Vec<u8> {
        self.data
    }
}
