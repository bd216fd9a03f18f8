//! Behaviour of the pool executor against bevy's own executors: identical
//! world state, ordering, access conflicts, run conditions, exclusive and
//! non-`Send` systems, commands and `ApplyDeferred`, errors and panics, lanes.

use bevy_ecs::error::{BevyError, ErrorContext, FallbackErrorHandler};
use bevy_ecs::prelude::*;
use bevy_ecs::schedule::SingleThreadedExecutor;
use engine_tasks::{Lane, Pool};
use engine_tasks_bevy::{install, Installer};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| Pool::builder().threads(4).build().expect("pool"))
}

#[derive(Component, Clone, Copy, PartialEq, Debug)]
struct Pos(i64, i64);
#[derive(Component, Clone, Copy, PartialEq, Debug)]
struct Vel(i64, i64);
#[derive(Component, Clone, Copy, PartialEq, Debug)]
struct Hp(i64);
#[derive(Component, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
struct Id(u64);
#[derive(Resource, Default, PartialEq, Debug)]
struct Tick(u64);
#[derive(Resource, Default, PartialEq, Debug)]
struct Spawned(u64);

fn tick(mut t: ResMut<Tick>) {
    t.0 += 1;
}
fn movement(mut q: Query<(&mut Pos, &Vel)>) {
    for (mut p, v) in &mut q {
        p.0 += v.0;
        p.1 += v.1;
    }
}
fn steer(t: Res<Tick>, mut q: Query<(&Pos, &mut Vel)>) {
    for (p, mut v) in &mut q {
        v.0 = (p.1 + t.0 as i64) % 7 - 3;
        v.1 = (p.0 - t.0 as i64) % 5 - 2;
    }
}
fn damage(mut q: Query<(&Pos, &mut Hp)>) {
    for (p, mut hp) in &mut q {
        hp.0 -= (p.0 + p.1).rem_euclid(3);
    }
}
fn despawn_dead(mut commands: Commands, q: Query<(Entity, &Hp)>) {
    for (e, hp) in &q {
        if hp.0 <= 0 {
            commands.entity(e).despawn();
        }
    }
}
fn spawner(mut commands: Commands, t: Res<Tick>, mut s: ResMut<Spawned>) {
    if t.0 % 3 == 0 {
        s.0 += 1;
        let k = s.0 as i64;
        commands.spawn((Id(1000 + s.0), Pos(k, -k), Vel(1, 1), Hp(20 + k % 7)));
    }
}
fn every_other(t: Res<Tick>) -> bool {
    t.0 % 2 == 0
}

fn game_schedule() -> Schedule {
    let mut schedule = Schedule::default();
    schedule.add_systems(
        (
            tick,
            steer,
            movement,
            damage.run_if(every_other),
            despawn_dead,
            spawner,
        )
            .chain(),
    );
    schedule
}

fn game_world() -> World {
    let mut world = World::new();
    world.init_resource::<Tick>();
    world.init_resource::<Spawned>();
    for i in 0..500 {
        world.spawn((
            Id(i as u64),
            Pos(i, i * 3 % 11),
            Vel(i % 3, -1),
            Hp(30 + i % 13),
        ));
    }
    world
}

fn snapshot(world: &mut World) -> Vec<(Id, Pos, Vel, Hp)> {
    let mut v: Vec<_> = world
        .query::<(&Id, &Pos, &Vel, &Hp)>()
        .iter(world)
        .map(|(i, p, v, h)| (*i, *p, *v, *h))
        .collect();
    v.sort_by_key(|x| x.0);
    v
}

#[test]
fn same_world_as_single_threaded_after_k_frames() {
    let mut reference = game_world();
    let mut single = game_schedule();
    single.set_executor(SingleThreadedExecutor::new());
    let mut ours_world = game_world();
    let mut ours = game_schedule();
    install(&mut ours, &mut ours_world, pool().handle()).unwrap();
    for _ in 0..60 {
        single.run(&mut reference);
        ours.run(&mut ours_world);
    }
    assert_eq!(reference.resource::<Tick>(), ours_world.resource::<Tick>());
    assert_eq!(
        reference.resource::<Spawned>(),
        ours_world.resource::<Spawned>()
    );
    assert_eq!(snapshot(&mut reference), snapshot(&mut ours_world));
}

#[derive(Resource, Default)]
struct Log(Mutex<Vec<&'static str>>);

macro_rules! loggers {
    ($($name:ident)*) => {$(
        fn $name(log: Res<Log>) {
            log.0.lock().unwrap().push(stringify!($name));
        }
    )*};
}
loggers!(a b c d marker s1 s2 t1 t2);

#[derive(SystemSet, Debug, Clone, PartialEq, Eq, Hash)]
enum Phase {
    First,
    Second,
}

#[test]
fn ordering_constraints_are_respected() {
    let mut world = World::new();
    world.init_resource::<Log>();
    let mut schedule = Schedule::default();
    schedule.configure_sets((Phase::First, Phase::Second).chain());
    schedule.add_systems((
        (a, b, c).chain(),
        d.after(marker).before(Phase::First),
        (s1, s2).in_set(Phase::First),
        (t1, t2).in_set(Phase::Second),
        marker.after(c),
    ));
    install(&mut schedule, &mut world, pool().handle()).unwrap();
    for _ in 0..50 {
        world.resource::<Log>().0.lock().unwrap().clear();
        schedule.run(&mut world);
        let log = world.resource::<Log>().0.lock().unwrap().clone();
        assert_eq!(log.len(), 9, "{log:?}");
        let pos = |n: &str| log.iter().position(|x| *x == n).unwrap();
        assert!(pos("a") < pos("b") && pos("b") < pos("c"), "{log:?}");
        assert!(
            pos("c") < pos("marker") && pos("marker") < pos("d"),
            "{log:?}"
        );
        for s in ["s1", "s2"] {
            assert!(pos("d") < pos(s), "{log:?}");
            for t in ["t1", "t2"] {
                assert!(pos(s) < pos(t), "{log:?}");
            }
        }
    }
}

#[derive(Resource, Default)]
struct Shared(u64);

static IN_WRITER: AtomicBool = AtomicBool::new(false);
static OVERLAPS: AtomicUsize = AtomicUsize::new(0);
static PARALLEL_READERS_SEEN: AtomicUsize = AtomicUsize::new(0);

fn busy() {
    let mut x = 0u64;
    for i in 0..20_000 {
        x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
    }
}

fn writer(mut s: ResMut<Shared>) {
    if IN_WRITER.swap(true, Ordering::SeqCst) {
        OVERLAPS.fetch_add(1, Ordering::SeqCst);
    }
    s.0 += 1;
    busy();
    IN_WRITER.store(false, Ordering::SeqCst);
}

fn reader(_s: Res<Shared>) {
    if IN_WRITER.load(Ordering::SeqCst) {
        OVERLAPS.fetch_add(1, Ordering::SeqCst);
    }
    PARALLEL_READERS_SEEN.fetch_add(1, Ordering::SeqCst);
    busy();
    if IN_WRITER.load(Ordering::SeqCst) {
        OVERLAPS.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn conflicting_systems_never_overlap() {
    let mut world = World::new();
    world.init_resource::<Shared>();
    let mut schedule = Schedule::default();
    schedule.add_systems((writer, writer, writer, reader, reader, writer, reader));
    install(&mut schedule, &mut world, pool().handle()).unwrap();
    for _ in 0..100 {
        schedule.run(&mut world);
    }
    assert_eq!(OVERLAPS.load(Ordering::SeqCst), 0);
    assert_eq!(world.resource::<Shared>().0, 400);
    assert_eq!(PARALLEL_READERS_SEEN.load(Ordering::SeqCst), 300);
}

#[derive(Resource, Default)]
struct Counts {
    gated: u32,
    in_set: u32,
    always: u32,
}
#[derive(Resource)]
struct Gate(bool);
#[derive(SystemSet, Debug, Clone, PartialEq, Eq, Hash)]
struct Gated;

#[test]
fn run_conditions_on_systems_and_sets() {
    let mut world = World::new();
    world.init_resource::<Counts>();
    world.insert_resource(Gate(false));
    let mut schedule = Schedule::default();
    schedule.configure_sets(Gated.run_if(|g: Res<Gate>| g.0));
    schedule.add_systems((
        (|mut c: ResMut<Counts>| c.gated += 1).run_if(|g: Res<Gate>| g.0),
        (|mut c: ResMut<Counts>| c.in_set += 1).in_set(Gated),
        (|mut c: ResMut<Counts>| c.always += 1),
        (|mut g: ResMut<Gate>| g.0 = !g.0).after(Gated),
    ));
    install(&mut schedule, &mut world, pool().handle()).unwrap();
    for _ in 0..10 {
        schedule.run(&mut world);
    }
    let c = world.resource::<Counts>();
    assert_eq!(c.always, 10);
    assert_eq!(c.in_set, 5);
    assert!(c.gated == 5 || c.gated == 4 || c.gated == 6, "{}", c.gated);
}

#[derive(Component)]
struct Marker;

#[test]
fn exclusive_systems_commands_and_apply_deferred() {
    let mut world = World::new();
    let mut schedule = Schedule::default();
    schedule.add_systems(
        (
            |mut commands: Commands| {
                commands.spawn(Marker);
            },
            ApplyDeferred,
            |world: &mut World| {
                let n = world.query::<&Marker>().iter(world).count();
                world.insert_resource(Shared(n as u64));
            },
            |q: Query<&Marker>, mut s: ResMut<Shared>| s.0 += q.iter().count() as u64 * 1000,
        )
            .chain(),
    );
    install(&mut schedule, &mut world, pool().handle()).unwrap();
    schedule.run(&mut world);
    assert_eq!(world.resource::<Shared>().0, 1001);
    schedule.run(&mut world);
    assert_eq!(world.resource::<Shared>().0, 2002);
}

#[test]
fn auto_inserted_sync_points_apply_commands() {
    let mut world = World::new();
    world.init_resource::<Shared>();
    let mut schedule = Schedule::default();
    schedule.add_systems(
        (
            |mut commands: Commands| {
                commands.spawn(Marker);
            },
            |q: Query<&Marker>, mut s: ResMut<Shared>| s.0 = q.iter().count() as u64,
        )
            .chain(),
    );
    install(&mut schedule, &mut world, pool().handle()).unwrap();
    for i in 1..=5 {
        schedule.run(&mut world);
        assert_eq!(world.resource::<Shared>().0, i);
    }
}

struct NotSend(std::rc::Rc<std::cell::Cell<u32>>, std::thread::ThreadId);

#[test]
fn non_send_systems_run_on_the_calling_thread() {
    let mut world = World::new();
    world.insert_non_send(NotSend(Default::default(), std::thread::current().id()));
    world.init_resource::<Shared>();
    let mut schedule = Schedule::default();
    schedule.add_systems((
        |ns: NonSend<NotSend>| {
            assert_eq!(ns.1, std::thread::current().id());
            ns.0.set(ns.0.get() + 1);
        },
        |mut s: ResMut<Shared>| s.0 += 1,
    ));
    install(&mut schedule, &mut world, pool().handle()).unwrap();
    for _ in 0..20 {
        schedule.run(&mut world);
    }
    assert_eq!(world.non_send::<NotSend>().0.get(), 20);
    assert_eq!(world.resource::<Shared>().0, 20);
}

static NON_SEND_IN: AtomicBool = AtomicBool::new(false);
static SEND_IN: AtomicBool = AtomicBool::new(false);

/// Waits (at most 10 s) until `flag` is set; whether it was.
fn meet(flag: &AtomicBool) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !flag.load(Ordering::Acquire) {
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::hint::spin_loop();
    }
    true
}

/// A non-`Send` system runs beside a `Send` system it does not conflict
/// with: each waits inside for the other to have started, which only
/// works if they overlap (bevy's executor overlaps them too).
#[test]
fn non_send_systems_overlap_with_systems_they_do_not_conflict_with() {
    let mut world = World::new();
    world.insert_non_send(NotSend(Default::default(), std::thread::current().id()));
    world.init_resource::<Shared>();
    let mut schedule = Schedule::default();
    schedule.add_systems((
        |ns: NonSend<NotSend>| {
            assert_eq!(ns.1, std::thread::current().id());
            NON_SEND_IN.store(true, Ordering::Release);
            assert!(meet(&SEND_IN), "the Send system never ran beside this one");
            ns.0.set(ns.0.get() + 1);
        },
        |mut s: ResMut<Shared>| {
            SEND_IN.store(true, Ordering::Release);
            assert!(
                meet(&NON_SEND_IN),
                "the non-Send system never ran beside this one"
            );
            s.0 += 1;
        },
    ));
    install(&mut schedule, &mut world, pool().handle()).unwrap();
    for _ in 0..5 {
        NON_SEND_IN.store(false, Ordering::Release);
        SEND_IN.store(false, Ordering::Release);
        schedule.run(&mut world);
    }
    assert_eq!(world.non_send::<NotSend>().0.get(), 5);
    assert_eq!(world.resource::<Shared>().0, 5);
}

static REPORTED: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn record(error: BevyError, ctx: ErrorContext) {
    REPORTED.lock().unwrap().push(format!("{ctx}: {error}"));
}

fn fails() -> Result {
    Err("broken".into())
}

#[test]
fn errors_and_panics_go_to_the_error_handler_and_next_run_works() {
    let mut world = World::new();
    world.init_resource::<Shared>();
    world.insert_resource(FallbackErrorHandler(record));
    let mut schedule = Schedule::default();
    schedule.add_systems((
        fails,
        |s: Res<Shared>| {
            if s.0 == 1 {
                panic!("boom");
            }
        },
        (|mut s: ResMut<Shared>| s.0 += 1).after(fails),
    ));
    install(&mut schedule, &mut world, pool().handle()).unwrap();
    for _ in 0..3 {
        schedule.run(&mut world);
    }
    assert_eq!(world.resource::<Shared>().0, 3);
    let reported = REPORTED.lock().unwrap();
    assert_eq!(reported.iter().filter(|r| r.contains("broken")).count(), 3);
    assert!(
        reported.iter().any(|r| r.contains("panicked")),
        "{reported:?}"
    );
}

#[test]
fn default_error_handler_panics_after_the_run_and_next_run_works() {
    let mut world = World::new();
    world.init_resource::<Shared>();
    let mut schedule = Schedule::default();
    schedule.add_systems(
        (
            |s: Res<Shared>| assert!(s.0 != 1, "boom"),
            |mut s: ResMut<Shared>| s.0 += 1,
        )
            .chain(),
    );
    install(&mut schedule, &mut world, pool().handle()).unwrap();
    schedule.run(&mut world);
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        schedule.run(&mut world);
    }));
    assert!(caught.is_err());
    schedule.run(&mut world);
    assert_eq!(world.resource::<Shared>().0, 3);
}

#[test]
fn lanes_can_be_set_per_system_and_install_again_replaces_the_executor() {
    let mut world = World::new();
    world.init_resource::<Shared>();
    let mut schedule = Schedule::default();
    schedule.add_systems((writer_bg, tick_free));
    Installer::new(pool().handle())
        .lane(writer_bg, Lane::Background)
        .lane(Phase::First, Lane::Normal)
        .install(&mut schedule, &mut world)
        .unwrap();
    schedule.run(&mut world);
    assert_eq!(world.resource::<Shared>().0, 1);
    install(&mut schedule, &mut world, pool().handle()).unwrap();
    schedule.run(&mut world);
    assert_eq!(world.resource::<Shared>().0, 2);
}

fn writer_bg(mut s: ResMut<Shared>) {
    s.0 += 1;
}
fn tick_free() {}

#[test]
fn failing_run_condition_with_default_handler_panics_after_the_run() {
    let mut world = World::new();
    world.init_resource::<Shared>();
    let mut schedule = Schedule::default();
    schedule.add_systems(
        (
            (|mut s: ResMut<Shared>| s.0 += 100).run_if(|s: Res<Shared>| -> Result<bool> {
                if s.0 == 1 {
                    Err("condition failed".into())
                } else {
                    Ok(false)
                }
            }),
            (|mut s: ResMut<Shared>| s.0 += 1).run_if(|| true),
        )
            .chain(),
    );
    install(&mut schedule, &mut world, pool().handle()).unwrap();
    schedule.run(&mut world);
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        schedule.run(&mut world);
    }));
    assert!(caught.is_err());
    schedule.run(&mut world);
    assert_eq!(world.resource::<Shared>().0, 3);
}

#[path = "../examples/small_game/game.rs"]
mod game;

#[test]
fn example_game_matches_single_threaded() {
    let mut reference = game::world();
    let mut single = game::schedule();
    single.set_executor(SingleThreadedExecutor::new());
    let mut world = game::world();
    let mut ours = game::schedule();
    install(&mut ours, &mut world, pool().handle()).unwrap();
    for _ in 0..40 {
        single.run(&mut reference);
        ours.run(&mut world);
    }
    let (a, b) = (
        reference.resource::<game::Stats>(),
        world.resource::<game::Stats>(),
    );
    assert_eq!(format!("{a:?}"), format!("{b:?}"));
    assert_eq!(reference.resource::<game::Clock>().frame, 40);
    assert_eq!(world.resource::<game::Clock>().frame, 40);
}

fn bg_lane_system(mut s: ResMut<Shared>) {
    s.0 += 1;
}
fn normal_lane_system(_s: Res<Counts>) {}
fn default_lane_system(_s: Res<Log>) {}

#[test]
fn systems_run_in_their_configured_lanes() {
    let mut world = World::new();
    world.init_resource::<Shared>();
    world.init_resource::<Counts>();
    world.init_resource::<Log>();
    let mut schedule = Schedule::default();
    schedule.add_systems((
        bg_lane_system,
        normal_lane_system.in_set(Phase::Second),
        default_lane_system,
    ));
    Installer::new(pool().handle())
        .lane(bg_lane_system, Lane::Background)
        .lane(Phase::Second, Lane::Normal)
        .install(&mut schedule, &mut world)
        .unwrap();
    engine_tasks::timeline::start().expect("no other session records");
    for _ in 0..3 {
        schedule.run(&mut world);
    }
    let timeline = engine_tasks::timeline::stop().expect("recording");
    let mut json = Vec::new();
    timeline.write_chrome_trace(&mut json).unwrap();
    let json = String::from_utf8(json).unwrap();
    let lanes_of = |name: &str| -> Vec<&str> {
        json.lines()
            .filter(|l| l.contains("\"node\"") && l.contains(name))
            .map(|l| {
                ["Background", "Normal", "FrameCritical"]
                    .into_iter()
                    .find(|lane| l.contains(&format!("\"lane\":\"{lane}\"")))
                    .unwrap_or("?")
            })
            .collect()
    };
    assert_eq!(lanes_of("bg_lane_system"), ["Background"; 3]);
    assert_eq!(lanes_of("normal_lane_system"), ["Normal"; 3]);
    assert_eq!(lanes_of("default_lane_system"), ["FrameCritical"; 3]);
    assert_eq!(world.resource::<Shared>().0, 3);
}

static IN_CHEAP_WRITER: AtomicBool = AtomicBool::new(false);
static CHEAP_OVERLAPS: AtomicUsize = AtomicUsize::new(0);

fn cheap_writer(mut s: ResMut<Counts>) {
    if IN_CHEAP_WRITER.swap(true, Ordering::SeqCst) {
        CHEAP_OVERLAPS.fetch_add(1, Ordering::SeqCst);
    }
    s.always += 1;
    IN_CHEAP_WRITER.store(false, Ordering::SeqCst);
}

fn cheap_reader(_s: Res<Counts>) {
    if IN_CHEAP_WRITER.load(Ordering::SeqCst) {
        CHEAP_OVERLAPS.fetch_add(1, Ordering::SeqCst);
    }
}

/// Cheap systems take the inline path (run by the thread that unblocked
/// them); conflicts must hold there too, next to a slow system elsewhere.
#[test]
fn cheap_conflicting_systems_never_overlap() {
    let mut world = World::new();
    world.init_resource::<Counts>();
    world.init_resource::<Shared>();
    let mut schedule = Schedule::default();
    schedule.add_systems((
        cheap_writer,
        cheap_reader,
        cheap_writer,
        cheap_reader,
        cheap_writer,
        |_s: ResMut<Shared>| busy(),
        cheap_reader,
    ));
    install(&mut schedule, &mut world, pool().handle()).unwrap();
    for _ in 0..300 {
        schedule.run(&mut world);
    }
    assert_eq!(CHEAP_OVERLAPS.load(Ordering::SeqCst), 0);
    assert_eq!(world.resource::<Counts>().always, 900);
}

static WAITED: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Records each error with the message of the panic it carries.
fn record_waited(mut error: BevyError, ctx: ErrorContext) {
    let payload = error.take_payload();
    let message = payload.as_deref().and_then(engine_tasks::panic_message);
    WAITED
        .lock()
        .unwrap()
        .push(format!("{ctx}: {error}: {message:?}"));
}

/// A run condition that waits on the pool (on a system, or on a set) is
/// refused at the wait's start: the wait could run a system of the same
/// run on the thread that holds the run's lock, which every system takes
/// as it ends. The refusal goes to the error handler, the conditioned
/// systems are skipped, the others run, and a run whose conditions do not
/// wait is normal.
#[test]
fn a_run_condition_that_waits_on_the_pool_is_refused_not_hung() {
    #[derive(SystemSet, Debug, Clone, PartialEq, Eq, Hash)]
    struct Waits;
    fn waits_on_the_pool(s: Res<Shared>) -> bool {
        if s.0 % 2 == 0 {
            let (a, b) = pool().join(|| 1, || 2);
            return a + b == 3;
        }
        true
    }
    #[derive(Resource, Default)]
    struct Ran(Vec<&'static str>);
    let mut world = World::new();
    world.init_resource::<Shared>();
    world.init_resource::<Ran>();
    world.insert_resource(FallbackErrorHandler(record_waited));
    let mut schedule = Schedule::default();
    schedule.configure_sets(Waits.run_if(waits_on_the_pool));
    schedule.add_systems((
        (|mut r: ResMut<Ran>| r.0.push("own")).run_if(waits_on_the_pool),
        (|mut r: ResMut<Ran>| r.0.push("in set")).in_set(Waits),
        |mut r: ResMut<Ran>| r.0.push("free"),
    ));
    install(&mut schedule, &mut world, pool().handle()).unwrap();
    for run in 0..4 {
        // The conditions wait on the pool in even runs.
        world.resource_mut::<Shared>().0 = run;
        schedule.run(&mut world);
        let mut ran = std::mem::take(&mut world.resource_mut::<Ran>().0);
        ran.sort_unstable();
        let reported = std::mem::take(&mut *WAITED.lock().unwrap());
        if run % 2 == 1 {
            assert_eq!(ran, ["free", "in set", "own"], "run {run}");
            assert!(reported.is_empty(), "run {run}: {reported:?}");
            continue;
        }
        assert_eq!(ran, ["free"], "run {run}");
        assert_eq!(reported.len(), 2, "run {run}: {reported:?}");
        for report in &reported {
            assert!(
                report.contains("`join` was called inside a run condition"),
                "run {run}: {report}"
            );
        }
    }
}

/// A panic payload whose own drop panics.
struct Bomb;

impl Drop for Bomb {
    fn drop(&mut self) {
        panic!("a panic payload's drop panicked");
    }
}

fn throw_bomb(_: BevyError, _: ErrorContext) {
    std::panic::panic_any(Bomb);
}

/// Two systems fail in one run, and the error handler panics for each with
/// a payload whose drop panics. The run re-raises the first payload after
/// it ends; the second is dropped where its drop's panic is caught (it
/// unwound out of the executor's bookkeeping, under the run's lock, and
/// aborted the process). The next run, with a handler that counts, works.
#[test]
fn a_second_panic_whose_payload_panics_as_it_drops_is_dropped_quietly() {
    let mut world = World::new();
    world.init_resource::<Shared>();
    world.insert_resource(FallbackErrorHandler(throw_bomb));
    let mut schedule = Schedule::default();
    schedule.add_systems((fails, fails, |mut s: ResMut<Shared>| s.0 += 1));
    install(&mut schedule, &mut world, pool().handle()).unwrap();
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        schedule.run(&mut world);
    }));
    let payload = caught.expect_err("the handler's first panic is re-raised");
    assert!(payload.is::<Bomb>(), "the first payload, unchanged");
    std::mem::forget(payload);
    world.insert_resource(FallbackErrorHandler(count_bombless));
    schedule.run(&mut world);
    assert_eq!(world.resource::<Shared>().0, 2);
    assert_eq!(
        BOMBLESS.load(Ordering::SeqCst),
        2,
        "both systems failed again"
    );
}

/// Errors the next run of the test above reported (not `REPORTED`, which
/// another test counts).
static BOMBLESS: AtomicUsize = AtomicUsize::new(0);

fn count_bombless(_: BevyError, _: ErrorContext) {
    BOMBLESS.fetch_add(1, Ordering::SeqCst);
}
