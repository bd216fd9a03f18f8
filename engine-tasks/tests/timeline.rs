//! The timeline recorder: its event counts match the pool's own counters,
//! and the Chrome trace it writes is valid and complete. One test per file
//! on purpose: the recorder sees every thread of the process.

use engine_tasks::{timeline, Lane, Pool, TaskGraph};
use serde_json::Value;
use std::collections::HashMap;
use std::time::Duration;

mod common;
use common::fib;

#[test]
fn recorded_events_match_counters_and_the_trace_is_complete() {
    let pool = Pool::builder().threads(3).build().unwrap();
    let mut b = TaskGraph::<()>::builder();
    b.node("physics", Lane::FrameCritical, |cx| {
        cx.pool().parallel_for(0..2000, 8, |i| {
            std::hint::black_box(i * i);
        });
    });
    b.node("ai", Lane::FrameCritical, |_| {
        std::thread::sleep(Duration::from_micros(200));
    });
    b.main_thread_node("render <&\"quoted\">", |_| {})
        .after(["physics", "ai"]);
    let mut graph = b.build().unwrap();
    // Warm up, then let every worker park: the session starts quiet.
    fib(&pool, 18);
    graph.run(&pool, &()).unwrap();
    std::thread::sleep(Duration::from_millis(300));

    let before = pool.stats();
    timeline::start().expect("no other session records");
    assert_eq!(
        timeline::start(),
        Err(timeline::TimelineError::AlreadyRecording),
        "one session at a time"
    );
    for _ in 0..20 {
        assert_eq!(fib(&pool, 20), 6765);
        graph.run(&pool, &()).unwrap();
        let spawned = pool.spawn(Lane::Normal, || 1).unwrap();
        assert_eq!(spawned.join().unwrap(), 1);
        std::thread::sleep(Duration::from_millis(2));
    }
    // Quiet again before stopping, so no park is half counted.
    std::thread::sleep(Duration::from_millis(300));
    let recorded = timeline::stop().expect("a session ran");
    let after = pool.stats();
    assert!(timeline::stop().is_none());

    let total = |s: &engine_tasks::PoolStats| {
        let t = s.total();
        (t.steal_operations, t.failed_steals, s.parks())
    };
    let (ops0, failed0, parks0) = total(&before);
    let (ops1, failed1, parks1) = total(&after);
    assert_eq!(recorded.dropped(), 0);
    let steals = recorded.count("steal");
    let from_peers = steals.events - steals.from_injector;
    assert!(ops1 > ops0, "the workload stole");
    assert!(parks1 > parks0, "the workload parked");
    assert_eq!(from_peers, ops1 - ops0, "one steal event per steal attempt");
    assert_eq!(
        steals.successful - steals.successful_from_injector,
        (ops1 - ops0) - (failed1 - failed0)
    );
    assert_eq!(
        recorded.count("park").events,
        parks1 - parks0,
        "one park span per park"
    );
    assert_eq!(recorded.count("frame").events, 20);
    assert_eq!(recorded.count("node").events, 60);

    let mut json = Vec::new();
    recorded.write_chrome_trace(&mut json).unwrap();
    let trace: Value = serde_json::from_slice(&json).expect("valid JSON");
    let events = trace["traceEvents"].as_array().unwrap();
    let mut open: HashMap<u64, Vec<String>> = HashMap::new();
    let mut last_ts: HashMap<u64, f64> = HashMap::new();
    let mut names = Vec::new();
    for e in events {
        let tid = e["tid"].as_u64().unwrap();
        let ph = e["ph"].as_str().unwrap();
        if ph == "M" {
            names.push(e["args"]["name"].as_str().unwrap().to_owned());
            continue;
        }
        let ts = e["ts"].as_f64().unwrap();
        let last = last_ts.entry(tid).or_insert(0.0);
        assert!(ts >= *last, "events of a thread are in time order");
        *last = ts;
        let cat = e["cat"].as_str().unwrap().to_owned();
        match ph {
            "B" => open.entry(tid).or_default().push(cat),
            "E" => {
                let begun = open.get_mut(&tid).and_then(Vec::pop);
                assert_eq!(begun.as_deref(), Some(cat.as_str()), "E matches the open B");
            }
            "i" => {}
            other => panic!("unexpected phase {other}"),
        }
    }
    assert!(open.values().all(Vec::is_empty), "every begun event ended");
    assert!(names.iter().any(|n| n.starts_with("engine-worker")));
    let text = String::from_utf8(json).unwrap();
    assert!(text.contains("physics") && text.contains(r#"render <&\"quoted\">"#));
    assert!(
        text.contains("tests/timeline.rs"),
        "plain tasks are named by spawn site"
    );
}
