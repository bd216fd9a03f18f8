//! What decides, per node and frame, whether its body runs (toggles and run
//! conditions, `builder.rs`) and which resources it may borrow (declared
//! access, `access.rs`), in the form a frame reads them.
//!
//! Each node has one [`GateSpan`]: its checks, inline when it has at most
//! one set with conditions and one condition of its own (most nodes), else
//! where they lie in a flat list; and where its resource types lie in
//! another. A node that runs reads its span, then only its own entries, so
//! the rules cost one look-up per node, not one per rule.
//! Everything here is written between frames only (a build, a toggle, or
//! the look-up of the frame's resources); frames only read it, except the
//! sets' [`FrameGate`]s, which answer once per frame, and the borrow counts
//! of nodes that write a type and have more than [`INLINE_BORROWS`] types,
//! which the thread running such a node zeroes and counts (`context.rs`).

use super::frame::FrameView;
use crate::graph::access::{AccessMode, Resources};
use crate::graph::builder::{Condition, TaskGraphBuilder};
use crate::graph::compile::{Compiled, Rows};
use crate::graph::context::{BorrowLine, Context, TypedAccess, BORROWS_PER_LINE, INLINE_BORROWS};
use crate::pool::forbid_waits::forbid_waits;
use crate::sync::frame_gate::{FrameGate, Panicked};
use crate::sync::prefetch;
use crossbeam_utils::CachePadded;

/// See the module docs.
pub(super) struct Gates {
    /// Per node: disabled, by its own toggle or one of its sets'.
    pub(super) disabled: Vec<bool>,
    /// Whether any node is disabled: a graph with none skips the look-up.
    pub(super) any_disabled: bool,
    pub(super) conditions: Vec<Condition>,
    /// Where each condition's closure is, for prefetching.
    condition_data: Vec<usize>,
    /// Per node: where its entries in `checks` and `typed` are; empty if
    /// no node has conditions or resource types.
    spans: Vec<GateSpan>,
    /// Each node's checks, in the order they are made: its sets that have
    /// conditions, then its own conditions.
    checks: Vec<Check>,
    /// Per set: its conditions (indices into `conditions`).
    set_conditions: Rows<u32>,
    /// Per set, each on its own cache line: nodes of a set on other threads
    /// ask it.
    set_gates: Vec<CachePadded<FrameGate>>,
    /// Each node's resource types (its own declarations and its sets'),
    /// one entry per type, with the strongest mode declared for it.
    typed: Vec<TypedAccess>,
    /// Borrow counts for the resource types of a node that writes one,
    /// past its first [`INLINE_BORROWS`] (those count on the stack,
    /// `context.rs`): node `i`'s start at line `spans[i].overflow_line`, of
    /// no other node, since the thread running a node writes them.
    overflow: Vec<BorrowLine>,
    /// The container and contents `typed`'s values were looked up in
    /// (`Resources::key`), if they were.
    resolved_for: Option<(u64, u64)>,
}

/// Where one node's rules are in the [`Gates`]' flat lists.
///
/// Most nodes are in at most one set with conditions and have at most one
/// condition of their own: those checks are inline (`set`, `condition`),
/// and `checks..checks_end` is empty. A node with more keeps every check
/// in the list, in order, and `NONE` inline.
#[derive(Copy, Clone)]
struct GateSpan {
    /// The node's one set with conditions, or [`NONE`].
    set: u32,
    /// The node's one own condition, or [`NONE`].
    condition: u32,
    checks: u32,
    checks_end: u32,
    typed: u32,
    typed_end: u32,
    overflow_line: u32,
    /// Whether the node declared writing any of its types: only then does
    /// it count borrows (`context.rs`).
    counts: bool,
}

/// No check inline in a [`GateSpan`].
const NONE: u32 = u32::MAX;

/// One check a node makes before its body runs.
#[derive(Copy, Clone)]
enum Check {
    /// The conditions of a set (an index into `set_conditions`), evaluated
    /// once per frame by the first of its nodes to ask.
    Set(u32),
    /// One of the node's own conditions (an index into `conditions`).
    Condition(u32),
}

impl Gates {
    /// No rules: for a graph not built yet.
    pub(super) fn new() -> Self {
        Gates {
            disabled: Vec::new(),
            any_disabled: false,
            conditions: Vec::new(),
            condition_data: Vec::new(),
            spans: Vec::new(),
            checks: Vec::new(),
            set_conditions: Rows::default(),
            set_gates: Vec::new(),
            typed: Vec::new(),
            overflow: Vec::new(),
            resolved_for: None,
        }
    }

    /// Refills the rules for a graph of `n` nodes being built from
    /// `compiled`, taking the builder's conditions; the replaced conditions
    /// go to `retired`. Toggles start on. Allocates nothing once the lists
    /// have held a graph as large.
    pub(super) fn rebuild<C: ?Sized>(
        &mut self,
        n: usize,
        builder: &mut TaskGraphBuilder<C>,
        compiled: &Compiled,
        retired: &mut Vec<Condition>,
    ) {
        self.disabled.clear();
        self.disabled.resize(n, false);
        retired.append(&mut self.conditions);
        self.conditions.append(&mut builder.conditions);
        self.conditions_changed();
        self.set_conditions.copy_from(&compiled.set_conditions);
        self.set_gates.clear();
        self.set_gates
            .resize_with(builder.sets.len(), || CachePadded::new(FrameGate::new()));
        self.spans.clear();
        self.checks.clear();
        self.typed.clear();
        let mut overflow_lines = 0;
        for i in 0..n {
            let (checks, typed) = (self.checks.len(), self.typed.len());
            let sets = compiled.node_sets.row(i).iter().copied();
            let sets = sets.filter(|&s| !compiled.set_conditions.row(s as usize).is_empty());
            self.checks.extend(sets.map(Check::Set));
            let own = compiled.node_conditions.row(i).iter().copied();
            self.checks.extend(own.map(Check::Condition));
            let (mut set, mut condition) = (NONE, NONE);
            let mut inline = true;
            for &check in &self.checks[checks..] {
                match check {
                    Check::Set(s) if set == NONE => set = s,
                    Check::Condition(c) if condition == NONE => condition = c,
                    _ => inline = false,
                }
            }
            if inline {
                self.checks.truncate(checks);
            } else {
                (set, condition) = (NONE, NONE);
            }
            for access in compiled.node_access.row(i) {
                let Some(type_id) = access.type_id else {
                    continue; // a raw id: ordering only, nothing to borrow
                };
                match self.typed[typed..]
                    .iter_mut()
                    .find(|t| t.type_id == type_id)
                {
                    Some(entry) if access.mode == AccessMode::Write => entry.mode = access.mode,
                    Some(_) => {}
                    None => self.typed.push(TypedAccess {
                        type_id,
                        mode: access.mode,
                        value: None,
                    }),
                }
            }
            let counts = self.typed[typed..]
                .iter()
                .any(|t| t.mode == AccessMode::Write);
            self.spans.push(GateSpan {
                set,
                condition,
                checks: checks as u32,
                checks_end: self.checks.len() as u32,
                typed: typed as u32,
                typed_end: self.typed.len() as u32,
                overflow_line: overflow_lines,
                counts,
            });
            if counts {
                overflow_lines += self::overflow_lines(self.typed.len() - typed) as u32;
            }
        }
        self.overflow.clear();
        self.overflow
            .resize_with(overflow_lines as usize, Default::default);
        self.any_disabled = false;
        if self.conditions.is_empty() && self.typed.is_empty() {
            // No rules to look up or prefetch: `rules_of` finds no span.
            self.spans.clear();
        }
        self.resolved_for = None;
    }

    /// Notes where the conditions' closures are, after they changed (a
    /// build, or a refill that swapped them in place). Allocates nothing
    /// once the list has held as many.
    pub(super) fn conditions_changed(&mut self) {
        self.condition_data.clear();
        self.condition_data.extend(
            self.conditions
                .iter()
                .map(|c| &**c as *const _ as *const u8 as usize),
        );
    }

    /// Looks up the value of every declared resource type in `resources`,
    /// claimed for the frame, unless they were looked up in the same
    /// container with the same contents (`Resources::key`).
    pub(super) fn resolve(&mut self, resources: &Resources) {
        if self.resolved_for == Some(resources.key()) {
            return;
        }
        for entry in &mut self.typed {
            entry.value = resources.value(entry.type_id).map(|v| v.cast::<()>());
        }
        self.resolved_for = Some(resources.key());
    }

    /// Node `index`'s rules, looked up once for a run of it: none if no
    /// node of the graph has conditions or resource types.
    #[inline]
    pub(super) fn rules_of(&self, index: u32) -> NodeRules<'_> {
        // `spans` is empty when no node has rules: one compare for a plain
        // graph.
        let Some(span) = self.spans.get(index as usize) else {
            return NodeRules::NONE;
        };
        let typed = &self.typed[span.typed as usize..span.typed_end as usize];
        let overflow: &[BorrowLine] = if !span.counts || typed.len() <= INLINE_BORROWS {
            &[]
        } else {
            let first = span.overflow_line as usize;
            &self.overflow[first..first + overflow_lines(typed.len())]
        };
        NodeRules {
            span: Some(span),
            typed,
            overflow,
        }
    }

    /// Asks the CPU to bring node `index`'s span into the cache, if the
    /// graph has rules (`Shared::prefetch_node`).
    #[inline]
    pub(super) fn prefetch_span(&self, index: u32) {
        if let Some(span) = self.spans.get(index as usize) {
            prefetch::value(span);
        }
    }

    /// Asks the CPU to bring node `index`'s checks and resource types into
    /// the cache, reading its span, which `prefetch_span` brought earlier
    /// in the walk (`Shared::prefetch_body`): its list of checks, or its
    /// inline set's gate and its own condition (the box and the closure).
    #[inline]
    pub(super) fn prefetch_rules(&self, index: u32) {
        let Some(span) = self.spans.get(index as usize) else {
            return;
        };
        if span.checks != span.checks_end {
            if let Some(check) = self.checks.get(span.checks as usize) {
                prefetch::value(check);
            }
        }
        if let Some(gate) = self.set_gates.get(span.set as usize) {
            prefetch::value(gate);
        }
        let condition = span.condition as usize;
        if let (Some(boxed), Some(&closure)) = (
            self.conditions.get(condition),
            self.condition_data.get(condition),
        ) {
            prefetch::value(boxed);
            prefetch::line(closure);
        }
        if let Some(typed) = self.typed.get(span.typed as usize) {
            prefetch::value(typed);
        }
    }

    /// Whether the node of `rules` runs this frame: the conditions of each
    /// of its sets (each set's evaluated once per frame, by the first of its
    /// nodes to ask), then its own, stopping at the first that does not
    /// hold.
    #[inline]
    pub(super) fn conditions_hold(
        &self,
        rules: &NodeRules<'_>,
        cx: &Context<'_>,
        frame: &FrameView<'_>,
    ) -> bool {
        let Some(span) = rules.span else {
            return true;
        };
        let holds = |condition: u32| (self.conditions[condition as usize])(cx);
        let set_holds = |set: u32| match self.set_gates[set as usize].known(frame.epoch) {
            Some(answer) => answer,
            None => self.ask_set(set, cx, frame),
        };
        if span.checks != span.checks_end {
            return self.checks[span.checks as usize..span.checks_end as usize]
                .iter()
                .all(|&check| match check {
                    Check::Set(set) => set_holds(set),
                    Check::Condition(condition) => holds(condition),
                });
        }
        (span.set == NONE || set_holds(span.set))
            && (span.condition == NONE || holds(span.condition))
    }

    /// Set `set`'s answer for `frame` when the frame has none yet:
    /// its conditions, evaluated here or by the thread that got there
    /// first. Out of line: once per set and frame.
    #[cold]
    #[inline(never)]
    fn ask_set(&self, set: u32, cx: &Context<'_>, frame: &FrameView<'_>) -> bool {
        let answer = self.set_gates[set as usize].answer_unknown(frame.epoch, frame.askers, || {
            // The set's other nodes wait for this answer: a wait on the
            // pool here could run one of them, on this thread or another,
            // and neither would ever finish (`pool/forbid_waits.rs`).
            forbid_waits(SET_CONDITION, || {
                let conditions = self.set_conditions.row(set as usize);
                conditions
                    .iter()
                    .all(|&c| (self.conditions[c as usize])(cx))
            })
        });
        match answer {
            Ok(answer) => answer,
            // Every node of the set fails as the one that evaluated it did:
            // none runs, and neither do any of their dependents.
            Err(Panicked) => panic!(
                "a run condition of one of this node's sets panicked in this \
                 frame, in the node of the set that evaluated it"
            ),
        }
    }
}

/// What a set's run conditions are, for the panic of a wait inside them.
const SET_CONDITION: &str = "a set's run condition (the set's nodes wait for its answer, \
                             and a wait on the pool there could run one of them)";

/// One node's rules for one run of it ([`Gates::rules_of`]).
pub(super) struct NodeRules<'g> {
    /// Where its checks are; `None` if no node has rules.
    span: Option<&'g GateSpan>,
    /// Its resource types.
    pub(super) typed: &'g [TypedAccess],
    /// The lines of its borrow counts past the first [`INLINE_BORROWS`].
    pub(super) overflow: &'g [BorrowLine],
}

impl NodeRules<'_> {
    const NONE: Self = NodeRules {
        span: None,
        typed: &[],
        overflow: &[],
    };

    /// Whether the node counts borrows: it declared writing a type.
    #[inline]
    pub(super) fn counts(&self) -> bool {
        self.span.is_some_and(|span| span.counts)
    }
}

/// How many lines of borrow counts a node of `types` resource types has
/// beside its inline ones.
fn overflow_lines(types: usize) -> usize {
    types
        .saturating_sub(INLINE_BORROWS)
        .div_ceil(BORROWS_PER_LINE)
}
