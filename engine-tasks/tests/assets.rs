//! Asset streaming: every outcome a request can have, path checks,
//! priorities, cancellation and counters.

use engine_tasks::assets::{
    decode_asset, encode_asset, AssetDecoder, AssetErrorKind, AssetEvent, AssetId, AssetStreamer,
    DECODE_STEP,
};
use engine_tasks::{BlockingPool, Pool};
use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!(
            "engine-tasks-{name}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn payload(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(seed) ^ (i / 7) as u8)
        .collect()
}

/// Drains events until `count` have arrived (or panics after 30 s).
fn collect(streamer: &AssetStreamer, count: usize) -> Vec<AssetEvent> {
    let mut events = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while events.len() < count {
        assert!(
            Instant::now() < deadline,
            "only {} of {count} events",
            events.len()
        );
        streamer.drain(&mut events);
        std::thread::sleep(Duration::from_millis(1));
    }
    events
}

fn by_id(events: Vec<AssetEvent>) -> HashMap<AssetId, AssetEvent> {
    events
        .into_iter()
        .map(|e| (e.as_ref().map(|a| a.id).unwrap_or_else(|err| err.id), e))
        .collect()
}

#[test]
fn codec_round_trips_and_detects_damage() {
    let data = payload(13, 100_000);
    let file = encode_asset(&data);
    assert!(file.len() < data.len(), "the codec compresses");
    assert_eq!(decode_asset(&file).unwrap(), data);
    assert_eq!(decode_asset(&encode_asset(&[])).unwrap(), Vec::<u8>::new());
    let mut steps = 0;
    let mut decoder = AssetDecoder::new(&file[..]).unwrap();
    while !decoder.step(1000).unwrap() {
        steps += 1;
    }
    assert_eq!(steps, 100, "1,000 bytes a step");
    assert_eq!(decoder.into_data(), data);

    let mut flipped = file.clone();
    let at = flipped.len() - 10;
    flipped[at] ^= 0x55;
    assert!(decode_asset(&flipped).is_err(), "a flipped byte is caught");
    assert!(
        decode_asset(&file[..file.len() / 2]).is_err(),
        "truncation is caught"
    );
    assert!(decode_asset(b"nope").is_err());
    let mut wrong_size = file.clone();
    wrong_size[4] ^= 1;
    assert!(decode_asset(&wrong_size).is_err(), "a wrong size is caught");
    let mut huge = file;
    huge[4..12].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(decode_asset(&huge).unwrap_err().contains("exceeds"));
}

#[test]
fn a_large_asset_decodes_into_a_buffer_of_its_size() {
    // Past the 16 MiB a decoder reserves up front, its output grows; it
    // ends no larger than the asset and the one spare byte the decoder
    // reads past the end, whole or in steps.
    let data = payload(7, (16 << 20) + 12_345);
    let file = encode_asset(&data);
    let whole = decode_asset(&file).unwrap();
    assert_eq!(whole, data);
    assert!(whole.capacity() <= data.len() + 1, "{}", whole.capacity());
    let mut decoder = AssetDecoder::new(&file[..]).unwrap();
    while !decoder.step(1 << 20).unwrap() {}
    let stepped = decoder.into_data();
    assert_eq!(stepped, data);
    assert!(
        stepped.capacity() <= data.len() + 1,
        "{}",
        stepped.capacity()
    );
}

#[test]
fn every_request_ends_with_the_right_event() {
    let dir = TempDir::new("outcomes");
    let root = dir.0.join("root");
    fs::create_dir_all(root.join("sub")).unwrap();
    let good = payload(3, 50_000);
    fs::write(root.join("good.eta"), encode_asset(&good)).unwrap();
    // Decoded in several background tasks.
    let big = payload(5, 5 * DECODE_STEP / 2);
    fs::write(root.join("big.eta"), encode_asset(&big)).unwrap();
    fs::write(root.join("sub/small.eta"), encode_asset(b"hello")).unwrap();
    fs::write(root.join("garbage.eta"), payload(7, 3000)).unwrap();
    let mut truncated = encode_asset(&good);
    truncated.truncate(truncated.len() - 100);
    fs::write(root.join("truncated.eta"), truncated).unwrap();
    fs::create_dir_all(root.join("a_directory")).unwrap();
    fs::write(dir.0.join("secret.eta"), encode_asset(b"outside")).unwrap();
    #[cfg(unix)]
    std::os::unix::fs::symlink(dir.0.join("secret.eta"), root.join("link_out.eta")).unwrap();
    #[cfg(unix)]
    std::os::unix::fs::symlink(root.join("good.eta"), root.join("link_in.eta")).unwrap();

    let pool = Pool::builder().threads(2).build().unwrap();
    let blocking = BlockingPool::builder().cap(4).build().unwrap();
    let streamer = AssetStreamer::new(&root, &pool, &blocking, 2).unwrap();
    let requests: Vec<(&str, AssetId)> = [
        "good.eta",
        "big.eta",
        "sub/small.eta",
        "./sub/small.eta",
        "missing.eta",
        "garbage.eta",
        "truncated.eta",
        "a_directory",
        "../secret.eta",
        "sub/../../secret.eta",
        "link_out.eta",
        "link_in.eta",
        "",
    ]
    .into_iter()
    .map(|p| (p, streamer.request(p, 0)))
    .chain([("absolute", streamer.request(dir.0.join("secret.eta"), 0))])
    .collect();
    let mut events = by_id(collect(&streamer, requests.len()));
    let mut outcome = |name: &str| {
        let id = requests.iter().find(|(n, _)| *n == name).unwrap().1;
        events.remove(&id).unwrap()
    };
    assert_eq!(outcome("good.eta").unwrap().data, good);
    assert_eq!(outcome("big.eta").unwrap().data, big);
    assert_eq!(outcome("link_in.eta").unwrap().data, good);
    assert_eq!(outcome("sub/small.eta").unwrap().data, b"hello");
    assert_eq!(outcome("./sub/small.eta").unwrap().data, b"hello");
    let kind = |e: AssetEvent| e.unwrap_err().kind;
    assert!(matches!(
        kind(outcome("missing.eta")),
        AssetErrorKind::NotFound
    ));
    assert!(matches!(
        kind(outcome("garbage.eta")),
        AssetErrorKind::Corrupt(_)
    ));
    assert!(matches!(
        kind(outcome("truncated.eta")),
        AssetErrorKind::Corrupt(_)
    ));
    assert!(matches!(
        kind(outcome("a_directory")),
        AssetErrorKind::NotAFile
    ));
    for escaping in [
        "../secret.eta",
        "sub/../../secret.eta",
        "link_out.eta",
        "",
        "absolute",
    ] {
        let err = outcome(escaping).unwrap_err();
        assert!(
            matches!(err.kind, AssetErrorKind::OutsideRoot),
            "{escaping}: {err}"
        );
    }
    let progress = streamer.progress();
    assert_eq!(progress.requested, 14);
    assert_eq!(progress.loaded, 5);
    assert_eq!(progress.failed, 9);
    assert_eq!(progress.finished(), 14);
    assert_eq!(
        progress.bytes_decoded,
        (2 * good.len() + big.len()) as u64 + 10
    );
    assert!(progress.bytes_read > 0);
    assert_eq!(progress.reads_in_flight, 0);
}

#[test]
fn higher_priority_is_read_first_and_cancelled_requests_end_cancelled() {
    let dir = TempDir::new("priority");
    for name in ["low", "mid", "high", "doomed"] {
        fs::write(dir.0.join(name), encode_asset(name.as_bytes())).unwrap();
    }
    let pool = Pool::builder().threads(1).build().unwrap();
    // One blocking thread, held by a gate task: requests queue up behind it.
    let blocking = BlockingPool::builder().cap(1).build().unwrap();
    let gate = Arc::new(AtomicBool::new(false));
    let g = gate.clone();
    let gated = blocking
        .spawn(move || {
            while !g.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(1));
            }
        })
        .unwrap();
    let streamer = AssetStreamer::new(&dir.0, &pool, &blocking, 1).unwrap();
    let low = streamer.request("low", 1);
    let doomed = streamer.request("doomed", 5);
    let high = streamer.request("high", 10);
    let mid = streamer.request("mid", 5);
    // The one reader job waits behind the gate; when it runs, it takes the
    // waiting requests most urgent first.
    assert!(streamer.cancel(doomed));
    gate.store(true, Ordering::SeqCst);
    gated.wait().unwrap();
    let events = collect(&streamer, 4);
    let order: Vec<AssetId> = events
        .iter()
        .map(|e| e.as_ref().map(|a| a.id).unwrap_or_else(|err| err.id))
        .collect();
    let loaded: Vec<AssetId> = order.iter().copied().filter(|&id| id != doomed).collect();
    assert_eq!(loaded, [high, mid, low]);
    let doomed_event = events
        .iter()
        .find(|e| e.as_ref().err().is_some_and(|err| err.id == doomed))
        .unwrap();
    assert!(matches!(
        doomed_event.as_ref().unwrap_err().kind,
        AssetErrorKind::Cancelled
    ));
    assert!(
        !streamer.cancel(doomed),
        "an ended request cannot be cancelled"
    );
    assert_eq!(streamer.progress().cancelled, 1);
    assert_eq!(streamer.progress().loaded, 3);
}

#[test]
fn shut_down_pools_fail_requests_instead_of_losing_them() {
    let dir = TempDir::new("shutdown");
    fs::write(dir.0.join("a"), encode_asset(b"a")).unwrap();
    let pool = Pool::builder().threads(1).build().unwrap();
    let blocking = BlockingPool::new();
    let streamer = AssetStreamer::new(&dir.0, &pool, &blocking, 4).unwrap();
    blocking.shutdown();
    let id = streamer.request("a", 0);
    let events = collect(&streamer, 1);
    let err = events.into_iter().next().unwrap().unwrap_err();
    assert_eq!(err.id, id);
    assert!(matches!(err.kind, AssetErrorKind::PoolUnavailable));
}

#[test]
fn a_root_that_is_not_a_directory_is_refused() {
    let dir = TempDir::new("badroot");
    let file = dir.0.join("file");
    fs::write(&file, b"x").unwrap();
    let pool = Pool::builder().threads(1).build().unwrap();
    let blocking = BlockingPool::new();
    assert!(AssetStreamer::new(&file, &pool, &blocking, 1).is_err());
    assert!(AssetStreamer::new(Path::new("/definitely/not/here"), &pool, &blocking, 1).is_err());
}
