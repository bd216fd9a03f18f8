//! Injected faults against the asset streamer and the pools. A file of its
//! own: a fault plan applies to the whole process.

use engine_tasks::assets::{encode_asset, AssetErrorKind, AssetStreamer};
use engine_tasks::faults::{self, FaultPlan, Site};
use engine_tasks::{BlockingPool, Lane, Pool};
use std::time::{Duration, Instant};

#[test]
fn a_panic_in_a_decode_task_ends_the_request_as_interrupted() {
    let dir = std::env::temp_dir().join(format!("engine-tasks-faults-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("a"), encode_asset(&[7u8; 1000])).unwrap();
    let pool = Pool::builder().threads(1).build().unwrap();
    let blocking = BlockingPool::new();
    let streamer = AssetStreamer::new(&dir, &pool, &blocking, 1).unwrap();

    // Every pool task now panics before its body: the decode task never
    // runs, and its request must still end, exactly once.
    faults::set_plan(FaultPlan {
        task_body: 1_000_000,
        ..FaultPlan::default()
    });
    let id = streamer.request("a", 0);
    let mut events = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while events.is_empty() {
        assert!(Instant::now() < deadline, "the request never ended");
        streamer.drain(&mut events);
        std::thread::sleep(Duration::from_millis(1));
    }
    faults::set_plan(FaultPlan::default());
    assert_eq!(events.len(), 1);
    let err = events.pop().unwrap().unwrap_err();
    assert_eq!(err.id, id);
    assert!(matches!(err.kind, AssetErrorKind::Interrupted), "{err}");
    assert!(!streamer.cancel(id), "the request has ended");
    assert!(faults::fired(Site::TaskBody) >= 1);

    // The pool still works afterwards.
    assert_eq!(pool.spawn(Lane::Normal, || 3).unwrap().join().unwrap(), 3);
    let _ = std::fs::remove_dir_all(&dir);
}
