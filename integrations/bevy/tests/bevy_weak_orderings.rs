//! bevy's weak-ordering scenarios (`chain_weak`, `before_weak`,
//! `after_weak`, mixed with strict and `*_ignore_deferred` orderings).
//!
//! bevy drops a weak ordering between systems that do not conflict, and
//! keeps it (as a strict one) between systems that do: conflicting access,
//! a run condition reading what the other writes, an exclusive system,
//! commands before a reader. This crate's executor documents that it keeps
//! every weak ordering as a strict one (which orderings are weak is private
//! to bevy). So in each case below:
//! - every ordering bevy keeps must hold on both executors;
//! - on the pool executor, the weak orderings bevy drops hold as well;
//! - on bevy's, two systems whose weak ordering it drops must be able to run
//!   at the same time: each waits (at most 10 s) until the other started.
//!
//! Most of bevy's weak-ordering tests count the edges of the built schedule
//! (private to bevy) instead of running it; here each is run, and what the
//! edges imply is observed instead.

mod common;

use bevy_ecs::prelude::*;
use common::{run, wait_for, Runner, RUNNERS};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

/// The cases of this file run one at a time: on bevy's executor two
/// systems wait for each other, which needs two of its pool's threads.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// Read or written by the systems of a case, as bevy's `Resource1`.
#[derive(Resource, Default)]
struct Shared(bool);

/// Read by other systems, as bevy's `Resource2`.
#[derive(Resource, Default)]
struct Unrelated;

/// Inserted by commands.
#[derive(Resource)]
struct Queued;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mark {
    Start,
    End,
}

/// What the systems of a case record.
#[derive(Resource, Default)]
struct Probe {
    marks: Mutex<Vec<(Mark, &'static str)>>,
    /// Two systems that must be running at the same time.
    meet: Option<[&'static str; 2]>,
    arrived: Mutex<Vec<&'static str>>,
    missed: AtomicBool,
}

impl Probe {
    fn enter(&self, name: &'static str) {
        self.marks.lock().unwrap().push((Mark::Start, name));
        if let Some(pair) = self.meet.filter(|pair| pair.contains(&name)) {
            self.arrived.lock().unwrap().push(name);
            let other = if pair[0] == name { pair[1] } else { pair[0] };
            if !wait_for(|| self.arrived.lock().unwrap().contains(&other)) {
                self.missed.store(true, Ordering::SeqCst);
            }
        }
    }

    fn leave(&self, name: &'static str) {
        self.marks.lock().unwrap().push((Mark::End, name));
    }
}

fn reader(name: &'static str) -> impl FnMut(Res<Shared>, Res<Probe>) {
    move |_: Res<Shared>, probe: Res<Probe>| {
        probe.enter(name);
        probe.leave(name);
    }
}

/// Writes `true` into [`Shared`].
fn writer(name: &'static str) -> impl FnMut(ResMut<Shared>, Res<Probe>) {
    move |mut shared: ResMut<Shared>, probe: Res<Probe>| {
        probe.enter(name);
        shared.0 = true;
        probe.leave(name);
    }
}

fn unrelated_reader(name: &'static str) -> impl FnMut(Res<Unrelated>, Res<Probe>) {
    move |_: Res<Unrelated>, probe: Res<Probe>| {
        probe.enter(name);
        probe.leave(name);
    }
}

/// Queues the insertion of [`Queued`].
fn inserter(name: &'static str) -> impl FnMut(Commands, Res<Probe>) {
    move |mut commands: Commands, probe: Res<Probe>| {
        probe.enter(name);
        commands.insert_resource(Queued);
        probe.leave(name);
    }
}

/// Needs [`Queued`]: fails validation (the run panics) without it.
fn needs_queued(name: &'static str) -> impl FnMut(Res<Queued>, Res<Probe>) {
    move |_: Res<Queued>, probe: Res<Probe>| {
        probe.enter(name);
        probe.leave(name);
    }
}

/// Asserts that [`Queued`] is not there yet.
fn before_queued(name: &'static str) -> impl FnMut(Option<Res<Queued>>, Res<Probe>) {
    move |queued: Option<Res<Queued>>, probe: Res<Probe>| {
        probe.enter(name);
        assert!(queued.is_none(), "{name} saw the queued command applied");
        probe.leave(name);
    }
}

fn exclusive(name: &'static str) -> impl FnMut(&mut World) {
    move |world: &mut World| {
        let probe = world.resource::<Probe>();
        probe.enter(name);
        probe.leave(name);
    }
}

/// Accesses nothing; runs only if its condition allows.
fn plain(name: &'static str) -> impl FnMut(Res<Probe>) {
    move |probe: Res<Probe>| {
        probe.enter(name);
        probe.leave(name);
    }
}

fn shared_written(shared: Res<Shared>) -> bool {
    shared.0
}

fn shared_not_yet_written(shared: Res<Shared>) -> bool {
    !shared.0
}

#[derive(SystemSet, Debug, Clone, PartialEq, Eq, Hash)]
enum Sets {
    A,
    B,
    C,
}

/// One scenario, and what to observe.
struct Case {
    build: fn(&mut Schedule),
    /// The systems that must run, in every run.
    ran: &'static [&'static str],
    /// `(a, b)`: `a` ends before `b` starts, on both executors.
    kept: &'static [(&'static str, &'static str)],
    /// `(a, b)`: `a` ends before `b` starts on the pool executor only (a
    /// weak ordering bevy drops).
    dropped: &'static [(&'static str, &'static str)],
    /// Two systems bevy's executor may run at once (not ordered there).
    overlap: Option<[&'static str; 2]>,
    /// Systems in the built schedule, sync points included.
    systems_len: Option<usize>,
}

impl Case {
    fn check(&self) {
        let _serial = one_at_a_time();
        for runner in RUNNERS {
            let mut world = World::new();
            world.init_resource::<Shared>();
            world.init_resource::<Unrelated>();
            world.insert_resource(Probe {
                meet: if runner.is_pool() { None } else { self.overlap },
                ..Probe::default()
            });
            let mut schedule = runner.schedule(&mut world);
            (self.build)(&mut schedule);
            runner.ready(&mut schedule, &mut world);
            let runs = if runner.is_pool() { 20 } else { 3 };
            for _ in 0..runs {
                world.resource_mut::<Shared>().0 = false;
                world.remove_resource::<Queued>();
                run(runner, &mut schedule, &mut world);
                self.check_run(runner, &world);
            }
            if let Some(len) = self.systems_len {
                assert_eq!(schedule.systems_len(), len, "{runner:?}");
            }
        }
    }

    fn check_run(&self, runner: Runner, world: &World) {
        let probe = world.resource::<Probe>();
        let marks = std::mem::take(&mut *probe.marks.lock().unwrap());
        probe.arrived.lock().unwrap().clear();
        let mut ran: Vec<_> = marks
            .iter()
            .filter(|(mark, _)| *mark == Mark::Start)
            .map(|(_, name)| *name)
            .collect();
        ran.sort_unstable();
        let mut expected = self.ran.to_vec();
        expected.sort_unstable();
        assert_eq!(ran, expected, "{runner:?}: {marks:?}");
        let at = |mark: Mark, name: &str| {
            marks
                .iter()
                .position(|m| *m == (mark, name))
                .unwrap_or_else(|| panic!("{runner:?}: no {mark:?} of {name}: {marks:?}"))
        };
        let pairs = self
            .kept
            .iter()
            .chain(if runner.is_pool() { self.dropped } else { &[] });
        for (a, b) in pairs {
            assert!(
                at(Mark::End, a) < at(Mark::Start, b),
                "{runner:?}: {a} before {b}: {marks:?}"
            );
        }
        assert!(
            !probe.missed.swap(false, Ordering::SeqCst),
            "{runner:?}: {:?} never ran at the same time",
            self.overlap
        );
    }
}

// bevy: schedule::schedule::tests::chain_weak_keeps_finish_dependency_for_deferred
#[test]
fn a_weak_chain_after_commands_keeps_its_sync_point() {
    Case {
        build: |s| {
            s.add_systems((inserter("insert"), needs_queued("read")).chain_weak());
        },
        ran: &["insert", "read"],
        kept: &[("insert", "read")],
        dropped: &[],
        overlap: None,
        systems_len: Some(3),
    }
    .check();
}

// bevy: schedule::schedule::tests::before_weak_orders_conflicting_systems
#[test]
fn before_weak_orders_conflicting_sets() {
    Case {
        build: |s| {
            s.configure_sets(Sets::A.before_weak(Sets::B));
            s.add_systems((writer("1").in_set(Sets::A), writer("2").in_set(Sets::B)));
        },
        ran: &["1", "2"],
        kept: &[("1", "2")],
        dropped: &[],
        overlap: None,
        systems_len: Some(2),
    }
    .check();
}

// bevy: schedule::schedule::tests::chain_weak_orders_conflicting_systems
#[test]
fn chain_weak_orders_conflicting_systems() {
    Case {
        build: |s| {
            s.add_systems((writer("1"), writer("2")).chain_weak());
        },
        ran: &["1", "2"],
        kept: &[("1", "2")],
        dropped: &[],
        overlap: None,
        systems_len: Some(2),
    }
    .check();
}

// bevy: schedule::schedule::tests::weak_set_ordering_with_ignore_deferred_adds_no_sync_point
#[test]
fn a_weak_set_ordering_also_ignoring_deferred_orders_without_a_sync_point() {
    Case {
        build: |s| {
            s.configure_sets((Sets::A, Sets::B).chain_weak());
            s.configure_sets(Sets::A.before_ignore_deferred(Sets::B));
            s.add_systems((
                inserter("insert").in_set(Sets::A),
                before_queued("check").in_set(Sets::B),
            ));
        },
        ran: &["insert", "check"],
        kept: &[("insert", "check")],
        dropped: &[],
        overlap: None,
        systems_len: Some(2),
    }
    .check();
}

// bevy: schedule::schedule::tests::weak_edge_after_ignore_deferred_edge_gets_bubbled_sync_point
#[test]
fn pending_commands_bubble_onto_a_weak_link_and_keep_it() {
    Case {
        build: |s| {
            s.add_systems(
                (
                    (inserter("insert"), unrelated_reader("other")).chain_ignore_deferred(),
                    needs_queued("read"),
                )
                    .chain_weak(),
            );
        },
        ran: &["insert", "other", "read"],
        kept: &[("insert", "other"), ("other", "read")],
        dropped: &[],
        overlap: None,
        systems_len: Some(4),
    }
    .check();
}

// bevy: schedule::schedule::tests::ignore_deferred_still_syncs_before_exclusive_system_in_weak_chain
#[test]
fn an_exclusive_system_in_a_weak_chain_gets_its_sync_point_and_keeps_its_links() {
    Case {
        build: |s| {
            s.add_systems(
                (
                    (inserter("insert"), |world: &mut World| {
                        assert!(world.contains_resource::<Queued>());
                        exclusive("exclusive")(world);
                    })
                        .chain_ignore_deferred(),
                    reader("read"),
                )
                    .chain_weak(),
            );
        },
        ran: &["insert", "exclusive", "read"],
        kept: &[("insert", "exclusive"), ("exclusive", "read")],
        dropped: &[],
        overlap: None,
        systems_len: Some(4),
    }
    .check();
}

// bevy: schedule::schedule::tests::chain_weak_adds_no_edges_for_non_conflicting_systems
//
// The strict chain in bevy's test is ordered on both executors; the weak
// one only on the pool executor.
#[test]
fn a_weak_chain_of_readers_is_ordered_on_the_pool_and_free_on_bevy() {
    Case {
        build: |s| {
            s.add_systems((reader("s1"), reader("s2"), reader("s3")).chain());
        },
        ran: &["s1", "s2", "s3"],
        kept: &[("s1", "s2"), ("s2", "s3")],
        dropped: &[],
        overlap: None,
        systems_len: Some(3),
    }
    .check();
    Case {
        build: |s| {
            s.add_systems((reader("w1"), reader("w2"), reader("w3")).chain_weak());
        },
        ran: &["w1", "w2", "w3"],
        kept: &[],
        dropped: &[("w1", "w2"), ("w2", "w3")],
        overlap: Some(["w1", "w2"]),
        systems_len: Some(3),
    }
    .check();
}

// bevy: schedule::schedule::tests::chain_weak_orders_conflicting_systems_with_finish_edge
#[test]
fn a_weak_chain_of_writers_is_ordered() {
    Case {
        build: |s| {
            s.add_systems((writer("1"), writer("2"), writer("3")).chain_weak());
        },
        ran: &["1", "2", "3"],
        kept: &[("1", "2"), ("2", "3")],
        dropped: &[],
        overlap: None,
        systems_len: Some(3),
    }
    .check();
}

// bevy: schedule::schedule::tests::chain_weak_keeps_finish_dependency_for_exclusive
#[test]
fn weak_links_to_and_from_an_exclusive_system_are_kept() {
    Case {
        build: |s| {
            s.add_systems((reader("1"), exclusive("exclusive"), reader("2")).chain_weak());
        },
        ran: &["1", "exclusive", "2"],
        kept: &[("1", "exclusive"), ("exclusive", "2")],
        dropped: &[],
        overlap: None,
        systems_len: Some(3),
    }
    .check();
}

// bevy: schedule::schedule::tests::chain_weak_between_non_conflicting_sets_adds_no_edges
#[test]
fn a_weak_chain_of_sets_of_readers_is_ordered_on_the_pool_and_free_on_bevy() {
    Case {
        build: |s| {
            s.configure_sets((Sets::A, Sets::B).chain_weak());
            s.add_systems((reader("1").in_set(Sets::A), reader("2").in_set(Sets::B)));
        },
        ran: &["1", "2"],
        kept: &[],
        dropped: &[("1", "2")],
        overlap: Some(["1", "2"]),
        systems_len: Some(2),
    }
    .check();
}

// bevy: schedule::schedule::tests::chain_weak_between_sets_fans_out_conflict_edges
#[test]
fn a_weak_chain_of_sets_of_writers_orders_every_pair() {
    Case {
        build: |s| {
            s.configure_sets((Sets::A, Sets::B).chain_weak());
            s.add_systems((
                (writer("a1"), writer("a2")).in_set(Sets::A),
                (writer("b1"), writer("b2")).in_set(Sets::B),
            ));
        },
        ran: &["a1", "a2", "b1", "b2"],
        kept: &[("a1", "b1"), ("a1", "b2"), ("a2", "b1"), ("a2", "b2")],
        dropped: &[],
        overlap: None,
        systems_len: Some(4),
    }
    .check();
}

// bevy: schedule::schedule::tests::before_weak_between_non_conflicting_sets_adds_no_edges
#[test]
fn before_weak_between_sets_of_readers_is_ordered_on_the_pool_and_free_on_bevy() {
    Case {
        build: |s| {
            s.configure_sets(Sets::A.before_weak(Sets::B));
            s.add_systems((reader("1").in_set(Sets::A), reader("2").in_set(Sets::B)));
        },
        ran: &["1", "2"],
        kept: &[],
        dropped: &[("1", "2")],
        overlap: Some(["1", "2"]),
        systems_len: Some(2),
    }
    .check();
}

// bevy: schedule::schedule::tests::after_weak_orders_conflicting_sets_with_finish_edge
#[test]
fn after_weak_between_sets_of_writers_is_ordered() {
    Case {
        build: |s| {
            s.configure_sets(Sets::B.after_weak(Sets::A));
            s.add_systems((writer("1").in_set(Sets::A), writer("2").in_set(Sets::B)));
        },
        ran: &["1", "2"],
        kept: &[("1", "2")],
        dropped: &[],
        overlap: None,
        systems_len: Some(2),
    }
    .check();
}

// bevy: schedule::schedule::tests::before_weak_keeps_finish_dependency_for_deferred
//
// bevy's system with commands queues none; this one queues an insertion,
// which the reader must see.
#[test]
fn before_weak_after_commands_keeps_the_ordering_and_its_sync_point() {
    Case {
        build: |s| {
            s.configure_sets(Sets::A.before_weak(Sets::B));
            s.add_systems((
                inserter("insert").in_set(Sets::A),
                needs_queued("read").in_set(Sets::B),
            ));
        },
        ran: &["insert", "read"],
        kept: &[("insert", "read")],
        dropped: &[],
        overlap: None,
        systems_len: Some(3),
    }
    .check();
}

// bevy: schedule::schedule::tests::chain_weak_materializes_transitive_conflict_edge
#[test]
fn a_weak_chain_orders_writers_linked_only_through_an_unrelated_system() {
    Case {
        build: |s| {
            s.add_systems((writer("1"), unrelated_reader("middle"), writer("3")).chain_weak());
        },
        ran: &["1", "middle", "3"],
        kept: &[("1", "3")],
        dropped: &[("1", "middle"), ("middle", "3")],
        overlap: Some(["1", "middle"]),
        systems_len: Some(3),
    }
    .check();
}

// bevy: schedule::schedule::tests::weak_chain_leaves_explicit_strict_edge_intact
#[test]
fn a_strict_ordering_beside_a_weak_chain_of_readers_holds() {
    Case {
        build: |s| {
            s.configure_sets((Sets::A, Sets::B, Sets::C).chain_weak());
            s.configure_sets(Sets::C.after(Sets::A));
            s.add_systems((
                reader("a").in_set(Sets::A),
                reader("b").in_set(Sets::B),
                reader("c").in_set(Sets::C),
            ));
        },
        ran: &["a", "b", "c"],
        kept: &[("a", "c")],
        dropped: &[("a", "b"), ("b", "c")],
        overlap: Some(["a", "b"]),
        systems_len: Some(3),
    }
    .check();
}

// bevy: schedule::schedule::tests::weak_ordering_keeps_edge_shared_with_strict_ordering
#[test]
fn sets_of_readers_ordered_both_weakly_and_strictly_are_ordered() {
    Case {
        build: |s| {
            s.configure_sets((Sets::A, Sets::B).chain_weak());
            s.configure_sets(Sets::B.after(Sets::A));
            s.add_systems((reader("1").in_set(Sets::A), reader("2").in_set(Sets::B)));
        },
        ran: &["1", "2"],
        kept: &[("1", "2")],
        dropped: &[],
        overlap: None,
        systems_len: Some(2),
    }
    .check();
}

// bevy: schedule::schedule::tests::strict_chain_after_weak_group_waits_for_whole_group
#[test]
fn a_system_strictly_after_a_weak_group_waits_for_all_of_it() {
    Case {
        build: |s| {
            s.add_systems(
                (
                    (reader("1"), reader("2"), reader("3")).chain_weak(),
                    reader("4"),
                )
                    .chain(),
            );
        },
        ran: &["1", "2", "3", "4"],
        kept: &[("1", "4"), ("2", "4"), ("3", "4")],
        dropped: &[("1", "2"), ("2", "3")],
        overlap: Some(["1", "2"]),
        systems_len: Some(4),
    }
    .check();
}

// bevy: schedule::schedule::tests::chain_weak_orders_writer_before_system_with_conflicting_condition
//
// The condition lets its system run only if the write happened before.
#[test]
fn a_weak_link_to_a_system_whose_condition_reads_the_write_is_kept() {
    Case {
        build: |s| {
            s.add_systems((writer("write"), plain("gated").run_if(shared_written)).chain_weak());
        },
        ran: &["write", "gated"],
        kept: &[("write", "gated")],
        dropped: &[],
        overlap: None,
        systems_len: Some(2),
    }
    .check();
}

// bevy: schedule::schedule::tests::chain_weak_orders_system_with_conflicting_condition_before_writer
//
// The condition lets its system run only if the write has not happened.
#[test]
fn a_weak_link_from_a_system_whose_condition_reads_what_follows_writes_is_kept() {
    Case {
        build: |s| {
            s.add_systems(
                (
                    plain("gated").run_if(shared_not_yet_written),
                    writer("write"),
                )
                    .chain_weak(),
            );
        },
        ran: &["gated", "write"],
        kept: &[("gated", "write")],
        dropped: &[],
        overlap: None,
        systems_len: Some(2),
    }
    .check();
}

// bevy: schedule::schedule::tests::chain_weak_orders_writer_before_set_with_conflicting_condition
#[test]
fn a_weak_link_to_a_set_whose_condition_reads_the_write_is_kept() {
    Case {
        build: |s| {
            s.configure_sets((Sets::A, Sets::B).chain_weak());
            s.configure_sets(Sets::B.run_if(shared_written));
            s.add_systems((
                writer("write").in_set(Sets::A),
                plain("gated").in_set(Sets::B),
            ));
        },
        ran: &["write", "gated"],
        kept: &[("write", "gated")],
        dropped: &[],
        overlap: None,
        systems_len: Some(2),
    }
    .check();
}

// bevy: schedule::schedule::tests::chain_ignore_deferred_around_weak_group_fans_out_without_sync_point
#[test]
fn a_chain_ignoring_deferred_after_a_weak_group_orders_all_of_it_without_syncing() {
    Case {
        build: |s| {
            s.add_systems(
                (
                    (reader("1"), reader("2")).chain_weak(),
                    inserter("insert"),
                    before_queued("3"),
                )
                    .chain_ignore_deferred(),
            );
        },
        ran: &["1", "2", "insert", "3"],
        kept: &[("1", "insert"), ("2", "insert"), ("insert", "3")],
        dropped: &[("1", "2")],
        overlap: Some(["1", "2"]),
        systems_len: Some(4),
    }
    .check();
}

// bevy: schedule::schedule::tests::chain_weak_between_ignore_deferred_groups_drops_edge_between_them
#[test]
fn a_weak_link_between_two_chains_ignoring_deferred_is_dropped_only_on_bevy() {
    Case {
        build: |s| {
            s.add_systems(
                (
                    (reader("1"), reader("2")).chain_ignore_deferred(),
                    (inserter("insert"), reader("3")).chain_ignore_deferred(),
                )
                    .chain_weak(),
            );
        },
        ran: &["1", "2", "insert", "3"],
        kept: &[("1", "2"), ("insert", "3")],
        dropped: &[("2", "insert")],
        overlap: Some(["1", "insert"]),
        systems_len: Some(4),
    }
    .check();
}
