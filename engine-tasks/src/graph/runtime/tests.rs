//! Unit tests of the frame policy: when frames are shared, and how long
//! threads linger.

use super::policy::linger_ticks;
use super::ShareThreshold;
use crate::{FrameSharing, Lane, Pool, TaskGraph};
use std::time::Duration;

/// Whether the next frame is shared follows the times of the nodes that
/// ran: not the frame's wall time (which held a panicking node's 50 ms
/// here), also after the first frame, and not a panicked node's time.
#[test]
fn a_light_frame_after_a_slow_panic_runs_alone() {
    let pool = Pool::builder().threads(1).build().unwrap();
    let mut b = TaskGraph::<()>::builder();
    // Far above the light frames, so that a preempted one stays alone.
    b.share_above(Duration::from_millis(10), Duration::ZERO);
    b.node("slow_panic", Lane::FrameCritical, |cx| {
        if cx.frame() == 0 {
            std::thread::sleep(Duration::from_millis(50));
            panic!("the first frame panics after 50 ms");
        }
    });
    b.node("after", Lane::FrameCritical, |_| {})
        .after(["slow_panic"]);
    let mut graph = b.build().unwrap();
    assert!(graph.run(&pool, &()).is_err());
    for _ in 0..3 {
        let stats = graph.run(&pool, &()).unwrap();
        assert_eq!(stats.sharing(), FrameSharing::Alone);
    }
}

/// With zero thresholds every frame is shared (queued, or planned), the
/// first one handed over after its first node; a shared frame is
/// announced to idle threads (they wait in it before parking) only
/// while it runs, also when a node panics.
#[test]
fn shared_frames_are_announced_only_while_they_run() {
    let pool = Pool::builder().threads(1).build().unwrap();
    let handle = pool.handle();
    for plan in [false, true] {
        let mut b = TaskGraph::<()>::builder();
        b.share_above(Duration::ZERO, Duration::ZERO)
            .plan_frames(plan);
        b.node("a", Lane::FrameCritical, |_| {});
        b.node("b", Lane::FrameCritical, |cx| {
            assert!(cx.frame() != 2, "a node panics in frame 2");
        })
        .after(["a"]);
        b.node("c", Lane::FrameCritical, |_| {}).after(["a"]);
        let mut graph = b.build().unwrap();
        for frame in 0..5 {
            let sharing = match graph.run(&handle, &()) {
                Ok(stats) => stats.sharing(),
                Err(error) => {
                    assert_eq!(frame, 2, "{error}");
                    graph.last_frame().sharing()
                }
            };
            let expected = match (frame, plan) {
                (0, _) => FrameSharing::HandedOver,
                (_, false) => FrameSharing::Shared,
                (_, true) => FrameSharing::Planned,
            };
            assert_eq!(sharing, expected, "frame {frame}");
            assert!(!handle.shared().in_shared_frame(), "frame {frame}");
        }
    }
}

#[test]
fn only_frames_of_enough_work_in_heavy_enough_nodes_wake_a_thread() {
    let worth_a_second_thread =
        |nanos, nodes| ShareThreshold::default().worth_a_second_thread(nanos, nodes);
    // 256 nodes of 1 µs.
    assert!(worth_a_second_thread(256_000.0, 256));
    // 256 empty nodes: 42 ns each on one thread, about 140 ns each when
    // a worker took part (the frame that used to keep waking it).
    assert!(!worth_a_second_thread(10_800.0, 256));
    assert!(!worth_a_second_thread(36_000.0, 256));
    // A few heavy nodes, and too little work in all.
    assert!(worth_a_second_thread(50_000.0, 10));
    assert!(!worth_a_second_thread(19_000.0, 10));
    assert!(!worth_a_second_thread(0.0, 0));
}

#[test]
fn zero_thresholds_share_every_frame_and_max_ones_none() {
    let always = ShareThreshold::new(Duration::ZERO, Duration::ZERO);
    assert!(always.worth_a_second_thread(0.0, 0));
    assert!(always.worth_a_second_thread(0.0, 256));
    let never = ShareThreshold::new(Duration::MAX, Duration::ZERO);
    assert!(!never.worth_a_second_thread(1e18, 1));
    let never = ShareThreshold::new(Duration::ZERO, Duration::MAX);
    assert!(!never.worth_a_second_thread(1e18, 1));
}

#[test]
fn threads_linger_only_for_short_gaps_between_frames() {
    // 1 tick = 1 ns here.
    assert_eq!(linger_ticks(3_000.0, 1.0), 20_000, "a short gap");
    assert_eq!(linger_ticks(15_000.0, 1.0), 20_000, "a longer one");
    assert_eq!(
        linger_ticks(20_000.0, 1.0),
        0,
        "no lingering from the limit on"
    );
    assert_eq!(
        linger_ticks(16_000_000.0, 1.0),
        0,
        "a 60 Hz loop parks at once"
    );
    // 3 ticks per ns: the limit scales with the tick rate.
    assert_eq!(linger_ticks(30_000.0, 1.0 / 3.0), 60_000);
    assert_eq!(linger_ticks(60_000.0, 1.0 / 3.0), 0);
}
