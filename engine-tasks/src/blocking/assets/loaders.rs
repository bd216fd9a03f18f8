//! The built-in loaders: raw bytes, the ETA1 container (LZ4), zstd
//! frames, and PNG images decoded to RGBA8. The three decoders work in
//! steps of about [`super::DECODE_STEP`] output bytes (PNG: whole rows), so a
//! large file becomes many short background tasks.
//!
//! A PNG's dimensions are read from its header and checked against
//! [`PngLoader::max_bytes`] before the decoder allocates anything.

use super::codec::{AssetDecoder, DECODE_STEP, MAX_ASSET_SIZE};
use super::loader::{AssetLoader, Decode, DecodeSteps, LoadContext};
use std::fmt;
use std::io::{self, Cursor, Read};
use std::task::Poll;

/// Largest decoded image [`PngLoader::default`] accepts: 256 MiB of RGBA8
/// (8192 x 8192).
pub const DEFAULT_MAX_IMAGE_BYTES: u64 = 256 << 20;

/// Why an LZ4 (ETA1) or zstd file could not be decoded.
#[derive(Debug)]
#[non_exhaustive]
pub enum CodecError {
    /// The bytes are not a valid file of the format (why).
    Corrupt(String),
    /// The decoded size (declared, or reached) is over the limit.
    TooLarge {
        /// The declared size, or the bytes decoded when it passed the limit.
        size: u64,
        /// The limit.
        max: u64,
    },
}

impl fmt::Display for CodecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CodecError::Corrupt(why) => write!(f, "corrupt: {why}"),
            CodecError::TooLarge { size, max } => {
                write!(f, "{size} decoded bytes, over the limit of {max}")
            }
        }
    }
}

impl std::error::Error for CodecError {}

/// Loads a file's bytes as they are: `Vec<u8>`, for the extensions given
/// (default: `bin`).
#[derive(Clone, Debug)]
pub struct BytesLoader {
    extensions: Vec<&'static str>,
}

impl Default for BytesLoader {
    fn default() -> Self {
        BytesLoader {
            extensions: vec!["bin"],
        }
    }
}

impl BytesLoader {
    /// A loader for these extensions.
    pub fn with_extensions(extensions: &[&'static str]) -> Self {
        BytesLoader {
            extensions: extensions.to_vec(),
        }
    }
}

impl AssetLoader for BytesLoader {
    type Asset = Vec<u8>;
    type Error = CodecError;

    fn extensions(&self) -> &[&str] {
        &self.extensions
    }

    fn load(
        &self,
        bytes: Vec<u8>,
        _: &mut LoadContext,
    ) -> Result<Decode<Vec<u8>, CodecError>, CodecError> {
        Ok(Decode::Done(bytes))
    }
}

/// Loads the ETA1 container ([`encode_asset`](super::encode_asset)): `eta`
/// files, as `Vec<u8>`, in steps.
#[derive(Clone, Copy, Debug, Default)]
pub struct Lz4Loader;

struct Lz4Steps(Option<AssetDecoder<Vec<u8>>>);

impl DecodeSteps for Lz4Steps {
    type Asset = Vec<u8>;
    type Error = CodecError;

    fn step(&mut self, budget: usize) -> Result<Poll<Vec<u8>>, CodecError> {
        let decoder = self.0.as_mut().expect("no step after the last");
        match decoder.step(budget) {
            Ok(true) => {
                let decoder = self.0.take().expect("no step after the last");
                Ok(Poll::Ready(decoder.into_data()))
            }
            Ok(false) => Ok(Poll::Pending),
            Err(why) => Err(CodecError::Corrupt(why)),
        }
    }
}

impl AssetLoader for Lz4Loader {
    type Asset = Vec<u8>;
    type Error = CodecError;

    fn extensions(&self) -> &[&str] {
        &["eta"]
    }

    fn load(
        &self,
        bytes: Vec<u8>,
        _: &mut LoadContext,
    ) -> Result<Decode<Vec<u8>, CodecError>, CodecError> {
        let decoder = AssetDecoder::new(bytes).map_err(CodecError::Corrupt)?;
        Ok(Decode::Steps(Box::new(Lz4Steps(Some(decoder)))))
    }
}

/// Loads one zstd frame: `zst` files, as `Vec<u8>`, in steps, with the
/// frame's checksum checked if it has one.
#[derive(Clone, Copy, Debug)]
pub struct ZstdLoader {
    /// Largest decoded size accepted (declared in the frame, or reached).
    pub max_size: u64,
}

impl Default for ZstdLoader {
    fn default() -> Self {
        ZstdLoader {
            max_size: MAX_ASSET_SIZE,
        }
    }
}

/// The most a zstd load reserves before decoding, whatever the frame
/// declares.
const ZSTD_MAX_RESERVE: u64 = 16 << 20;

type ZstdStream =
    ruzstd::decoding::StreamingDecoder<Cursor<Vec<u8>>, ruzstd::decoding::FrameDecoder>;

struct ZstdSteps {
    stream: ZstdStream,
    data: Vec<u8>,
    max: u64,
}

impl DecodeSteps for ZstdSteps {
    type Asset = Vec<u8>;
    type Error = CodecError;

    fn step(&mut self, budget: usize) -> Result<Poll<Vec<u8>>, CodecError> {
        // The output grows by at most `DECODE_STEP` at a time, as the frame
        // really decodes, whatever the budget (`usize::MAX` inline) or the
        // size the frame declares.
        let mut left = budget.max(1);
        while left > 0 {
            let chunk = left.min(DECODE_STEP);
            if let Some(data) = self.fill(chunk)? {
                return Ok(Poll::Ready(data));
            }
            left -= chunk;
        }
        Ok(Poll::Pending)
    }
}

impl ZstdSteps {
    /// Decodes up to `chunk` more bytes: `Some` with the value at the end of
    /// the frame; `TooLarge` past the limit.
    fn fill(&mut self, chunk: usize) -> Result<Option<Vec<u8>>, CodecError> {
        let start = self.data.len();
        let room = self.max.saturating_sub(start as u64).saturating_add(1);
        let want = (chunk as u64).min(room) as usize;
        self.data.resize(start + want, 0);
        let mut filled = 0;
        while filled < want {
            match self.stream.read(&mut self.data[start + filled..]) {
                Ok(0) => {
                    self.data.truncate(start + filled);
                    return self.finish().map(Some);
                }
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(CodecError::Corrupt(format!("zstd: {e}"))),
            }
        }
        if self.data.len() as u64 > self.max {
            let size = self.data.len() as u64;
            return Err(CodecError::TooLarge {
                size,
                max: self.max,
            });
        }
        Ok(None)
    }

    fn finish(&mut self) -> Result<Vec<u8>, CodecError> {
        let frame = &self.stream.decoder;
        if let (Some(stored), Some(computed)) = (
            frame.get_checksum_from_data(),
            frame.get_calculated_checksum(),
        ) {
            if stored != computed {
                return Err(CodecError::Corrupt("zstd: checksum mismatch".into()));
            }
        }
        let declared = frame.content_size();
        if declared != 0 && declared != self.data.len() as u64 {
            let got = self.data.len();
            return Err(CodecError::Corrupt(format!(
                "zstd: decoded {got} bytes, frame says {declared}"
            )));
        }
        let source = self.stream.get_ref();
        let (end, len) = (source.position(), source.get_ref().len() as u64);
        if end != len {
            return Err(CodecError::Corrupt(format!(
                "{} bytes after the zstd frame",
                len - end
            )));
        }
        Ok(std::mem::take(&mut self.data))
    }
}

impl AssetLoader for ZstdLoader {
    type Asset = Vec<u8>;
    type Error = CodecError;

    fn extensions(&self) -> &[&str] {
        &["zst"]
    }

    fn load(
        &self,
        bytes: Vec<u8>,
        _: &mut LoadContext,
    ) -> Result<Decode<Vec<u8>, CodecError>, CodecError> {
        let stream = ruzstd::decoding::StreamingDecoder::new(Cursor::new(bytes))
            .map_err(|e| CodecError::Corrupt(format!("zstd: {e}")))?;
        let declared = stream.decoder.content_size();
        if declared > self.max_size {
            return Err(CodecError::TooLarge {
                size: declared,
                max: self.max_size,
            });
        }
        // The declared size is the file's word, not a fact: reserve no more
        // than the compressed size can plausibly make up front, and grow
        // while decoding.
        let plausible = (stream.get_ref().get_ref().len() as u64).saturating_mul(8);
        let reserve = declared.min(plausible).min(ZSTD_MAX_RESERVE);
        let data = Vec::with_capacity(reserve as usize);
        Ok(Decode::Steps(Box::new(ZstdSteps {
            stream,
            data,
            max: self.max_size,
        })))
    }
}

/// An image decoded to 8-bit RGBA, rows top to bottom.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Image {
    /// Pixels per row.
    pub width: u32,
    /// Rows.
    pub height: u32,
    /// `width * height * 4` bytes: red, green, blue, alpha.
    pub rgba: Vec<u8>,
}

/// Why a PNG file could not be decoded.
#[derive(Debug)]
#[non_exhaustive]
pub enum ImageError {
    /// The header's dimensions need more than the loader's limit
    /// (refused before anything is allocated).
    TooLarge {
        /// Declared width.
        width: u32,
        /// Declared height.
        height: u32,
        /// Bytes of RGBA8 they need (`u64::MAX` if that overflows).
        bytes: u64,
        /// The limit.
        max: u64,
    },
    /// Not a PNG, or a corrupt or truncated one (the codec's error).
    Decode(Box<dyn std::error::Error + Send + Sync>),
}

impl fmt::Display for ImageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ImageError::TooLarge {
                width,
                height,
                bytes,
                max,
            } => write!(
                f,
                "{width}x{height} needs {bytes} bytes, over the limit of {max}"
            ),
            ImageError::Decode(e) => write!(f, "PNG: {e}"),
        }
    }
}

impl std::error::Error for ImageError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ImageError::Decode(e) => Some(&**e),
            ImageError::TooLarge { .. } => None,
        }
    }
}

fn decode_error(e: impl std::error::Error + Send + Sync + 'static) -> ImageError {
    ImageError::Decode(Box::new(e))
}

/// Loads PNG images (`png` files) as [`Image`]s with the `png` crate, a few
/// rows per step (an interlaced image in one step).
#[derive(Clone, Copy, Debug)]
pub struct PngLoader {
    /// Largest decoded image accepted, in bytes of RGBA8.
    pub max_bytes: u64,
}

impl Default for PngLoader {
    fn default() -> Self {
        PngLoader {
            max_bytes: DEFAULT_MAX_IMAGE_BYTES,
        }
    }
}

impl PngLoader {
    /// A loader that refuses images over `max_bytes` of RGBA8.
    pub fn with_max_bytes(max_bytes: u64) -> Self {
        PngLoader { max_bytes }
    }

    /// Checks the dimensions in the IHDR chunk (which must come first), and
    /// returns the bytes of RGBA8 they need. A size that overflows 64 bits
    /// or `usize` is too large whatever the limit.
    fn check_header(&self, bytes: &[u8]) -> Result<usize, ImageError> {
        const SIGNATURE: [u8; 8] = [0x89, b'P', b'N', b'G', b'\r', b'\n', 0x1a, b'\n'];
        if bytes.len() < 24 || bytes[..8] != SIGNATURE || &bytes[12..16] != b"IHDR" {
            let why = io::Error::new(
                io::ErrorKind::InvalidData,
                "no PNG signature and IHDR chunk",
            );
            return Err(decode_error(why));
        }
        let width = u32::from_be_bytes(bytes[16..20].try_into().expect("4 bytes"));
        let height = u32::from_be_bytes(bytes[20..24].try_into().expect("4 bytes"));
        let needed = u64::from(width)
            .checked_mul(u64::from(height))
            .and_then(|pixels| pixels.checked_mul(4));
        match needed.filter(|&n| n <= self.max_bytes) {
            Some(n) => usize::try_from(n).map_err(|_| ImageError::TooLarge {
                width,
                height,
                bytes: n,
                max: self.max_bytes,
            }),
            None => Err(ImageError::TooLarge {
                width,
                height,
                bytes: needed.unwrap_or(u64::MAX),
                max: self.max_bytes,
            }),
        }
    }
}

type PngReader = png::Reader<Cursor<Vec<u8>>>;

struct PngSteps {
    reader: PngReader,
    color: png::ColorType,
    width: u32,
    height: u32,
    /// Bytes of RGBA8 the image needs (checked against the limit).
    size: usize,
    rgba: Vec<u8>,
}

/// Appends `row` (8-bit samples of `color`) to `out` as RGBA8.
fn to_rgba(color: png::ColorType, row: &[u8], out: &mut Vec<u8>) -> Result<(), ImageError> {
    match color {
        png::ColorType::Rgba => out.extend_from_slice(row),
        png::ColorType::Rgb => {
            for p in row.chunks_exact(3) {
                out.extend_from_slice(&[p[0], p[1], p[2], 255]);
            }
        }
        png::ColorType::Grayscale => {
            for &g in row {
                out.extend_from_slice(&[g, g, g, 255]);
            }
        }
        png::ColorType::GrayscaleAlpha => {
            for p in row.chunks_exact(2) {
                out.extend_from_slice(&[p[0], p[0], p[0], p[1]]);
            }
        }
        png::ColorType::Indexed => {
            let why = io::Error::new(io::ErrorKind::InvalidData, "palette not expanded");
            return Err(decode_error(why));
        }
    }
    Ok(())
}

impl PngSteps {
    fn image(&mut self) -> Result<Image, ImageError> {
        self.reader.finish().map_err(decode_error)?;
        if self.rgba.len() != self.size {
            let why = io::Error::new(io::ErrorKind::InvalidData, "wrong number of pixels");
            return Err(decode_error(why));
        }
        Ok(Image {
            width: self.width,
            height: self.height,
            rgba: std::mem::take(&mut self.rgba),
        })
    }
}

impl DecodeSteps for PngSteps {
    type Asset = Image;
    type Error = ImageError;

    fn step(&mut self, budget: usize) -> Result<Poll<Image>, ImageError> {
        let start = self.rgba.len();
        while self.rgba.len() - start < budget.max(1) {
            match self.reader.next_row().map_err(decode_error)? {
                Some(row) => to_rgba(self.color, row.data(), &mut self.rgba)?,
                None => return self.image().map(Poll::Ready),
            }
        }
        Ok(Poll::Pending)
    }
}

impl AssetLoader for PngLoader {
    type Asset = Image;
    type Error = ImageError;

    fn extensions(&self) -> &[&str] {
        &["png"]
    }

    fn load(
        &self,
        bytes: Vec<u8>,
        _: &mut LoadContext,
    ) -> Result<Decode<Image, ImageError>, ImageError> {
        let size = self.check_header(&bytes)?;
        // The codec's own allocations: the image plus its row buffers.
        let limits = png::Limits {
            bytes: usize::try_from(self.max_bytes.saturating_mul(2)).unwrap_or(usize::MAX),
        };
        let mut decoder = png::Decoder::new_with_limits(Cursor::new(bytes), limits);
        decoder.set_transformations(png::Transformations::normalize_to_color8());
        let mut reader = decoder.read_info().map_err(decode_error)?;
        let (width, height) = (reader.info().width, reader.info().height);
        let (color, _) = reader.output_color_type();
        // The decoder read the same header.
        debug_assert_eq!(size as u64, u64::from(width) * u64::from(height) * 4);
        let mut rgba = Vec::with_capacity(size);
        if reader.info().interlaced {
            // Rows come pass by pass: decode the whole frame at once.
            let size = reader.output_buffer_size().ok_or_else(|| {
                decode_error(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "image too large",
                ))
            })?;
            let mut buf = vec![0; size];
            let frame = reader.next_frame(&mut buf).map_err(decode_error)?;
            for row in buf[..frame.buffer_size()].chunks_exact(frame.line_size) {
                to_rgba(color, row, &mut rgba)?;
            }
            return Ok(Decode::Done(Image {
                width,
                height,
                rgba,
            }));
        }
        Ok(Decode::Steps(Box::new(PngSteps {
            reader,
            color,
            width,
            height,
            size,
            rgba,
        })))
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::{ImageError, PngLoader};

    /// A PNG signature and an IHDR chunk's start with these dimensions.
    fn header(width: u32, height: u32) -> Vec<u8> {
        let mut bytes = vec![
            0x89, b'P', b'N', b'G', b'\r', b'\n', 0x1a, b'\n', 0, 0, 0, 13,
        ];
        bytes.extend_from_slice(b"IHDR");
        bytes.extend_from_slice(&width.to_be_bytes());
        bytes.extend_from_slice(&height.to_be_bytes());
        bytes
    }

    /// Sizes whose byte count overflows 64 bits are too large even with no
    /// limit: 2^31 x 2^31 wrapped to 0 bytes and passed any limit, and
    /// u32::MAX x u32::MAX wrapped to a smaller count.
    #[test]
    fn sizes_that_overflow_are_too_large_whatever_the_limit() {
        let unlimited = PngLoader {
            max_bytes: u64::MAX,
        };
        for (width, height) in [
            (1 << 31, 1 << 31),
            (u32::MAX, u32::MAX),
            (u32::MAX, 1 << 31),
        ] {
            match unlimited.check_header(&header(width, height)) {
                Err(ImageError::TooLarge { bytes, .. }) => assert_eq!(bytes, u64::MAX),
                other => panic!("{width} x {height}: {other:?}"),
            }
        }
        assert_eq!(unlimited.check_header(&header(2, 3)).unwrap(), 24);
        let limited = PngLoader { max_bytes: 23 };
        assert!(matches!(
            limited.check_header(&header(2, 3)),
            Err(ImageError::TooLarge {
                bytes: 24,
                max: 23,
                ..
            })
        ));
    }
}
