//! Timeline sessions started and stopped from two threads at once. A file
//! of its own: the recorder is the whole process's, and a session started
//! here would take another test's events.

use engine_tasks::timeline;
use std::sync::Barrier;

/// Recording is on exactly while a session is: a `start` racing a `stop`
/// never leaves recording on with no session (which made every
/// instrumented point take the sessions' lock until the next start).
#[test]
fn recording_is_on_exactly_while_a_session_is() {
    const ROUNDS: usize = 20_000;
    let (go, raced, checked) = (Barrier::new(2), Barrier::new(2), Barrier::new(2));
    // Rounds that ended recording with no session (or the other way).
    let mut wrong = Vec::new();
    std::thread::scope(|s| {
        s.spawn(|| {
            for _ in 0..ROUNDS {
                go.wait();
                let _ = timeline::start();
                raced.wait();
                checked.wait();
            }
        });
        for round in 0..ROUNDS {
            go.wait();
            let _ = timeline::stop();
            raced.wait();
            let recording = timeline::is_recording();
            let session = timeline::stop();
            if recording != session.is_some() {
                wrong.push(round);
            }
            checked.wait();
        }
    });
    assert!(wrong.is_empty(), "rounds {wrong:?}");
}
