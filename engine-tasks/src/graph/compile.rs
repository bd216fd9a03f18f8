//! Compiling a builder's nodes, sets, orderings, conditions and accesses
//! into what the runtime runs: node-to-node ordering edges in index form,
//! and per node its run conditions, its conditioned sets and its accesses.
//!
//! # Sets and orderings
//!
//! Orderings name nodes or sets. They are resolved on an *extended* graph
//! whose vertices are the nodes and, for every set, an entry and an exit
//! vertex: "x after set S" is an edge from S's exit to x, "x before S" one
//! from x to S's entry, a member of S lies between S's entry and exit
//! (entry -> member -> exit; a nested set by its own entry and exit), and
//! every set's entry joins its exit directly, so an ordering through an
//! empty set still holds (the node edges below take that shortcut only for
//! a set without nodes in it). A cycle of that graph is a
//! [`GraphError::Cycle`] naming every node and set on it, in running order.
//! The node-to-node edges are then, for each node, the first nodes reached
//! from it through set vertices only, leaving out a set vertex that one of
//! those first nodes leads to itself (what lies past it is ordered after
//! that node already).
//!
//! # Accesses
//!
//! Every pair of nodes whose accesses conflict (`access.rs`) and that no
//! declared ordering orders, directly or transitively, is an *ambiguity*.
//! Unless the builder makes ambiguities an error, they are ordered by
//! declaration: each node, in declaration order, gets an edge from each
//! conflicting node declared before it that nothing orders against it yet,
//! nearest first (so conflicting nodes in a row form a chain, not every
//! pair). The reachability between accessing nodes is updated after each
//! added edge, so no added edge can close a cycle.
//!
//! All of it reuses the compiler's buffers: a graph of the same shape as
//! the last one compiles without allocating (`TaskGraphBuilder::build_into`).

use super::access::{conflict_between, Access};
use super::builder::{Name, Owner, Relation};
use super::GraphError;

/// Most nodes a graph may have (indices are `u32`).
pub const MAX_NODES: usize = u32::MAX as usize - 1;

/// A compact list of lists: row `i` is `items[start[i]..start[i + 1]]`.
#[derive(Debug, Clone)]
pub(super) struct Rows<T> {
    pub(super) start: Vec<u32>,
    pub(super) items: Vec<T>,
}

impl<T> Default for Rows<T> {
    fn default() -> Self {
        Rows {
            start: vec![0],
            items: Vec::new(),
        }
    }
}

impl<T: Copy> Rows<T> {
    /// Fills `rows` rows from `(row, item)` pairs, each row in input order.
    fn fill(&mut self, rows: usize, pairs: impl Iterator<Item = (u32, T)> + Clone) {
        self.start.clear();
        self.start.resize(rows + 1, 0);
        for (row, _) in pairs.clone() {
            self.start[row as usize + 1] += 1;
        }
        for i in 0..rows {
            self.start[i + 1] += self.start[i];
        }
        self.items.clear();
        let Some((_, first)) = pairs.clone().next() else {
            return;
        };
        self.items.resize(self.start[rows] as usize, first);
        // The next free position of each row, kept in `start` shifted by
        // one and restored below.
        for (row, item) in pairs {
            let at = &mut self.start[row as usize];
            self.items[*at as usize] = item;
            *at += 1;
        }
        for i in (1..=rows).rev() {
            self.start[i] = self.start[i - 1];
        }
        self.start[0] = 0;
    }

    /// Makes these rows a copy of `other`, in the memory these hold.
    pub(super) fn copy_from(&mut self, other: &Rows<T>) {
        self.start.clear();
        self.start.extend_from_slice(&other.start);
        self.items.clear();
        self.items.extend_from_slice(&other.items);
    }

    pub(super) fn row(&self, i: usize) -> &[T] {
        &self.items[self.range(i)]
    }

    /// Where row `i` lies in `items`.
    pub(super) fn range(&self, i: usize) -> std::ops::Range<usize> {
        self.start[i] as usize..self.start[i + 1] as usize
    }
}

/// A name's node or set.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) enum Target {
    Node(u32),
    Set(u32),
}

/// Names to nodes and sets: `(hash, target)` sorted by hash, each hit
/// confirmed by comparing the name itself.
#[derive(Default)]
pub(super) struct NameIndex {
    entries: Vec<(u64, Target)>,
}

/// FNV-1a: stable, and cheap for short names.
fn name_hash(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

impl NameIndex {
    /// Indexes `nodes` and `sets` by name; a name used twice is an error.
    fn fill(&mut self, nodes: &[Name], sets: &[Name]) -> Result<(), GraphError> {
        self.entries.clear();
        let all = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (name_hash(n), Target::Node(i as u32)))
            .chain(
                sets.iter()
                    .enumerate()
                    .map(|(i, n)| (name_hash(n), Target::Set(i as u32))),
            );
        self.entries.extend(all);
        let name = |t: Target| -> &str {
            match t {
                Target::Node(i) => &nodes[i as usize],
                Target::Set(i) => &sets[i as usize],
            }
        };
        // By name too, among equal hashes: a name used twice then sits
        // beside itself even when another name's hash collides with it.
        self.entries
            .sort_unstable_by(|a, b| a.0.cmp(&b.0).then_with(|| name(a.1).cmp(name(b.1))));
        for pair in self.entries.windows(2) {
            if pair[0].0 == pair[1].0 && name(pair[0].1) == name(pair[1].1) {
                return Err(GraphError::DuplicateNode(name(pair[0].1).to_owned()));
            }
        }
        Ok(())
    }

    /// The node or set called `wanted`.
    pub(super) fn get(&self, wanted: &str, nodes: &[Name], sets: &[Name]) -> Option<Target> {
        self.get_with(wanted, |i| &nodes[i as usize], |i| &sets[i as usize])
    }

    /// The node or set called `wanted`, given each node's and set's name.
    pub(super) fn get_with<'n>(
        &self,
        wanted: &str,
        node: impl Fn(u32) -> &'n str,
        set: impl Fn(u32) -> &'n str,
    ) -> Option<Target> {
        let hash = name_hash(wanted);
        let first = self.entries.partition_point(|&(h, _)| h < hash);
        self.entries[first..]
            .iter()
            .take_while(|&&(h, _)| h == hash)
            .map(|&(_, target)| target)
            .find(|&target| {
                let name = match target {
                    Target::Node(i) => node(i),
                    Target::Set(i) => set(i),
                };
                name == wanted
            })
    }
}

/// What the builder hands to the compiler.
pub(super) struct Input<'a> {
    pub(super) nodes: &'a [Name],
    pub(super) sets: &'a [Name],
    pub(super) orders: &'a [(Owner, Name, Relation)],
    pub(super) memberships: &'a [(Owner, Name)],
    pub(super) accesses: &'a [(Owner, Access)],
    /// The owner of each run condition, in order.
    pub(super) condition_owners: &'a [Owner],
    pub(super) ambiguities_are_errors: bool,
}

/// The compiled graph, in index form; reused from build to build.
#[derive(Default)]
pub(super) struct Compiled {
    /// Node-to-node edges: each node's successors, and its dependencies.
    pub(super) successors: Rows<u32>,
    pub(super) dependencies: Rows<u32>,
    /// Every node, each after all of its dependencies.
    pub(super) topological: Vec<u32>,
    /// Each node's accesses, its own and those of the sets it is in.
    pub(super) node_access: Rows<Access>,
    /// Each node's own run conditions, and its sets (directly or through
    /// nested sets) that have run conditions or can be disabled.
    pub(super) node_conditions: Rows<u32>,
    pub(super) node_sets: Rows<u32>,
    /// Each set's run conditions, and every node in it.
    pub(super) set_conditions: Rows<u32>,
    pub(super) set_nodes: Rows<u32>,
    /// Conflicting pairs that no ordering ordered: `(first, second, what)`.
    pub(super) ambiguities: Vec<(u32, u32, &'static str)>,
    pub(super) names: NameIndex,
}

/// Buffers the compiler reuses.
#[derive(Default)]
pub(super) struct Scratch {
    edges: Vec<(u32, u32)>,
    extended: Rows<u32>,
    pending: Vec<u32>,
    order: Vec<u32>,
    stamp: Vec<u32>,
    stack: Vec<u32>,
    has_nodes: Vec<bool>,
    /// Per vertex of the extended graph, the nodes with an edge into it.
    node_preds: Rows<u32>,
    parents: Rows<u32>,
    pairs: Vec<(u32, u32)>,
    access_pairs: Vec<(u32, Access)>,
    accessing: Vec<u32>,
    reach: Vec<u64>,
}

/// Compiles `input` into `out` (see the module docs).
pub(super) fn compile(
    input: &Input<'_>,
    out: &mut Compiled,
    scratch: &mut Scratch,
) -> Result<(), GraphError> {
    let (n, sets) = (input.nodes.len(), input.sets.len());
    if n > MAX_NODES {
        return Err(GraphError::TooManyNodes(n));
    }
    out.names.fill(input.nodes, input.sets)?;
    extended_edges(input, out, scratch)?;
    check_acyclic(input, scratch)?;
    node_edges(input, scratch);
    set_rows(input, out, scratch);
    derive_access_edges(input, out, scratch)?;
    let pairs = scratch.edges.iter().copied();
    out.successors.fill(n, pairs.clone());
    out.dependencies.fill(n, pairs.map(|(a, b)| (b, a)));
    topological_order(n, out, scratch);
    debug_assert_eq!(out.topological.len(), n, "the extended graph was acyclic");
    let _ = sets;
    Ok(())
}

/// Vertex numbers of the extended graph.
fn entry(n: usize, target: Target) -> u32 {
    match target {
        Target::Node(i) => i,
        Target::Set(s) => (n + 2 * s as usize) as u32,
    }
}

fn exit(n: usize, target: Target) -> u32 {
    match target {
        Target::Node(i) => i,
        Target::Set(s) => (n + 2 * s as usize + 1) as u32,
    }
}

fn owner_target(owner: Owner) -> Target {
    match owner {
        Owner::Node(i) => Target::Node(i),
        Owner::Set(i) => Target::Set(i),
    }
}

/// The name of a vertex of the extended graph.
fn vertex_name<'a>(input: &Input<'a>, v: u32) -> &'a str {
    let n = input.nodes.len();
    match (v as usize).checked_sub(n) {
        None => &input.nodes[v as usize],
        Some(set) => &input.sets[set / 2],
    }
}

/// Resolves the orderings and memberships into edges of the extended graph.
fn extended_edges(
    input: &Input<'_>,
    out: &Compiled,
    scratch: &mut Scratch,
) -> Result<(), GraphError> {
    let n = input.nodes.len();
    let owner_name = |owner: Owner| -> &str {
        match owner {
            Owner::Node(i) => &input.nodes[i as usize],
            Owner::Set(i) => &input.sets[i as usize],
        }
    };
    let resolve = |name: &str| out.names.get(name, input.nodes, input.sets);
    scratch.edges.clear();
    for (owner, name, relation) in input.orders {
        let Some(target) = resolve(name) else {
            return Err(GraphError::UnknownDependency {
                node: owner_name(*owner).to_owned(),
                dependency: name.to_string(),
            });
        };
        let me = owner_target(*owner);
        scratch.edges.push(match relation {
            Relation::After => (exit(n, target), entry(n, me)),
            Relation::Before => (exit(n, me), entry(n, target)),
        });
    }
    for (member, name) in input.memberships {
        let Some(Target::Set(set)) = resolve(name) else {
            return Err(GraphError::UnknownSet {
                member: owner_name(*member).to_owned(),
                set: name.to_string(),
            });
        };
        let member = owner_target(*member);
        scratch
            .edges
            .push((entry(n, Target::Set(set)), entry(n, member)));
        scratch
            .edges
            .push((exit(n, member), exit(n, Target::Set(set))));
    }
    for set in 0..input.sets.len() as u32 {
        scratch
            .edges
            .push((entry(n, Target::Set(set)), exit(n, Target::Set(set))));
    }
    let vertices = n + 2 * input.sets.len();
    scratch
        .extended
        .fill(vertices, scratch.edges.iter().copied());
    Ok(())
}

/// Kahn's algorithm on the extended graph; on a cycle, names it.
fn check_acyclic(input: &Input<'_>, scratch: &mut Scratch) -> Result<(), GraphError> {
    let vertices = scratch.extended.start.len() - 1;
    let pending = &mut scratch.pending;
    pending.clear();
    pending.resize(vertices, 0);
    for &to in &scratch.extended.items {
        pending[to as usize] += 1;
    }
    let order = &mut scratch.order;
    order.clear();
    order.extend((0..vertices as u32).filter(|&v| pending[v as usize] == 0));
    let mut next = 0;
    while next < order.len() {
        let v = order[next] as usize;
        next += 1;
        for &to in scratch.extended.row(v) {
            pending[to as usize] -= 1;
            if pending[to as usize] == 0 {
                order.push(to);
            }
        }
    }
    if order.len() == vertices {
        return Ok(());
    }
    Err(GraphError::Cycle(cycle_names(input, scratch)))
}

/// The names along a cycle of the extended graph, in running order: a set
/// once where the cycle goes from its entry vertex straight to its exit,
/// and twice where members come between (`a` before and after set `S` of
/// member `b`: `a -> S -> b -> S`, the way round the cycle). Every vertex
/// Kahn's algorithm left has a left predecessor (that is why it was left), so walking
/// predecessors from one of them must come back to a vertex walked before,
/// and the walk between the two visits is a cycle.
fn cycle_names(input: &Input<'_>, scratch: &Scratch) -> Vec<String> {
    let vertices = scratch.extended.start.len() - 1;
    let stuck = |v: u32| scratch.pending[v as usize] > 0;
    let mut predecessors: Vec<Vec<u32>> = vec![Vec::new(); vertices];
    for from in 0..vertices {
        for &to in scratch.extended.row(from) {
            predecessors[to as usize].push(from as u32);
        }
    }
    let start = (0..vertices as u32)
        .find(|&v| stuck(v))
        .expect("a vertex is left");
    let mut position = vec![usize::MAX; vertices];
    let mut walk = Vec::new();
    let mut v = start;
    while position[v as usize] == usize::MAX {
        position[v as usize] = walk.len();
        walk.push(v);
        v = *predecessors[v as usize]
            .iter()
            .find(|&&p| stuck(p))
            .expect("a left vertex has a left predecessor");
    }
    // The walk went backwards: reverse it into running order, starting
    // from its first vertex (a node before any set, the first declared).
    let mut cycle = walk.split_off(position[v as usize]);
    cycle.reverse();
    let first = (0..cycle.len()).min_by_key(|&i| cycle[i]).unwrap_or(0);
    cycle.rotate_left(first);
    let mut names: Vec<String> = Vec::new();
    for &v in &cycle {
        let name = vertex_name(input, v);
        if names.last().map(String::as_str) != Some(name) {
            names.push(name.to_owned());
        }
    }
    if names.len() > 1 && names.first() == names.last() {
        names.pop();
    }
    names
}

/// The node-to-node edges: from each node, the first nodes reached through
/// set vertices only (module docs); into `scratch.edges`, deduplicated.
fn node_edges(input: &Input<'_>, scratch: &mut Scratch) {
    let n = input.nodes.len();
    let sets = input.sets.len();
    // Whether each set has a node in it (through nested sets too): only an
    // empty set is crossed from its entry straight to its exit.
    let has_nodes = &mut scratch.has_nodes;
    has_nodes.clear();
    has_nodes.resize(sets, false);
    for &v in scratch.order.iter().rev() {
        // Reverse topological order: a set's entry comes before its
        // members, so by the time we see an entry its members are done.
        let Some(set) = (v as usize).checked_sub(n) else {
            continue;
        };
        if set % 2 == 1 {
            continue;
        }
        let set = set / 2;
        let exit_vertex = (n + 2 * set + 1) as u32;
        has_nodes[set] = scratch.extended.row(v as usize).iter().any(|&to| {
            to as usize != exit_vertex as usize
                && match (to as usize).checked_sub(n) {
                    None => true,
                    Some(inner) => inner % 2 == 0 && has_nodes[inner / 2],
                }
        });
    }
    if sets > 0 {
        let extended = &scratch.extended;
        scratch.node_preds.fill(
            n + 2 * sets,
            (0..n as u32).flat_map(move |from| {
                extended
                    .row(from as usize)
                    .iter()
                    .filter(move |&&to| to as usize >= n)
                    .map(move |&to| (to, from))
            }),
        );
    }
    scratch.edges.clear();
    scratch.stamp.clear();
    scratch.stamp.resize(n + 2 * sets, u32::MAX);
    for node in 0..n as u32 {
        scratch.stack.clear();
        scratch.stack.push(node);
        scratch.stamp[node as usize] = node;
        while let Some(v) = scratch.stack.pop() {
            // A set vertex that a node found from `node` (not `node`
            // itself) has an edge into: everything past it is past that
            // node too, which is ordered after `node` already, so crossing
            // it would add only redundant edges (through a chain of k empty
            // sets, k(k-1)/2 of them). A row's nodes are found before its
            // set vertices are crossed.
            if v as usize >= n {
                let stamp = &scratch.stamp;
                let preds = scratch.node_preds.row(v as usize);
                if preds
                    .iter()
                    .any(|&p| p != node && stamp[p as usize] == node)
                {
                    continue;
                }
            }
            // A set with nodes in it is crossed through its members only,
            // not from its entry straight to its exit.
            let skip = match (v as usize).checked_sub(n) {
                Some(set_vertex) if set_vertex % 2 == 0 && has_nodes[set_vertex / 2] => v + 1,
                _ => u32::MAX,
            };
            for &to in scratch.extended.row(v as usize) {
                if to == skip || scratch.stamp[to as usize] == node {
                    continue;
                }
                scratch.stamp[to as usize] = node;
                if (to as usize) < n {
                    scratch.edges.push((node, to));
                } else {
                    scratch.stack.push(to);
                }
            }
        }
    }
}

/// Per set: its conditions and its nodes; per node: its conditions, its
/// sets, and its accesses (own and inherited from its sets).
fn set_rows(input: &Input<'_>, out: &mut Compiled, scratch: &mut Scratch) {
    let n = input.nodes.len();
    let sets = input.sets.len();
    let conditions = input.condition_owners.iter().enumerate();
    out.node_conditions.fill(
        n,
        conditions.clone().filter_map(|(c, owner)| match owner {
            Owner::Node(i) => Some((*i, c as u32)),
            Owner::Set(_) => None,
        }),
    );
    out.set_conditions.fill(
        sets,
        conditions.filter_map(|(c, owner)| match owner {
            Owner::Set(s) => Some((*s, c as u32)),
            Owner::Node(_) => None,
        }),
    );
    // Each member's direct parent sets (members: nodes, then sets).
    let parent_pairs = input.memberships.iter().filter_map(|(member, name)| {
        let Some(Target::Set(set)) = out.names.get(name, input.nodes, input.sets) else {
            return None;
        };
        let row = match member {
            Owner::Node(i) => *i,
            Owner::Set(s) => n as u32 + *s,
        };
        Some((row, set))
    });
    scratch.parents.fill(n + sets, parent_pairs);
    // Every set each node is in, through nested sets.
    scratch.pairs.clear();
    scratch.stamp.clear();
    scratch.stamp.resize(sets, u32::MAX);
    for node in 0..n as u32 {
        scratch.stack.clear();
        scratch
            .stack
            .extend_from_slice(scratch.parents.row(node as usize));
        while let Some(set) = scratch.stack.pop() {
            if scratch.stamp[set as usize] == node {
                continue;
            }
            scratch.stamp[set as usize] = node;
            scratch.pairs.push((node, set));
            let row = scratch.parents.row(n + set as usize);
            scratch.stack.extend_from_slice(row);
        }
    }
    out.node_sets.fill(n, scratch.pairs.iter().copied());
    out.set_nodes
        .fill(sets, scratch.pairs.iter().map(|&(node, set)| (set, node)));
    // Accesses: each node's own, then those of each of its sets.
    scratch.access_pairs.clear();
    for (owner, access) in input.accesses {
        match owner {
            Owner::Node(i) => scratch.access_pairs.push((*i, *access)),
            Owner::Set(s) => {
                for &node in out.set_nodes.row(*s as usize) {
                    scratch.access_pairs.push((node, *access));
                }
            }
        }
    }
    out.node_access
        .fill(n, scratch.access_pairs.iter().copied());
}

/// Adds an edge for every conflicting pair no ordering orders (module docs).
///
/// Longer than most functions here: its three passes (reachability bits,
/// the pairs' conflicts, the edges added nearest first) share the scratch
/// bit sets, and apart they would pass them around for nothing.
fn derive_access_edges(
    input: &Input<'_>,
    out: &mut Compiled,
    scratch: &mut Scratch,
) -> Result<(), GraphError> {
    out.ambiguities.clear();
    let n = input.nodes.len();
    scratch.accessing.clear();
    scratch
        .accessing
        .extend((0..n as u32).filter(|&i| !out.node_access.row(i as usize).is_empty()));
    let k = scratch.accessing.len();
    if k < 2 {
        return Ok(());
    }
    // `reach`: per node, the accessing nodes reachable from it, one bit
    // each (by position in `accessing`).
    let words = k.div_ceil(64);
    scratch.reach.clear();
    scratch.reach.resize(n * words, 0);
    scratch.pairs.clear();
    scratch.pairs.extend(scratch.edges.iter().copied());
    topo_for_reach(n, scratch);
    let bit_of = |scratch: &Scratch, node: u32| scratch.accessing.binary_search(&node).ok();
    for &v in scratch.order.iter().rev() {
        for e in edges_from(&scratch.pairs, v) {
            let to = e.1;
            if let Some(b) = bit_of(scratch, to) {
                scratch.reach[v as usize * words + b / 64] |= 1 << (b % 64);
            }
            for w in 0..words {
                let add = scratch.reach[to as usize * words + w];
                scratch.reach[v as usize * words + w] |= add;
            }
        }
    }
    let reaches = |reach: &[u64], from: u32, bit: usize| {
        reach[from as usize * words + bit / 64] >> (bit % 64) & 1 == 1
    };
    let conflict = |out: &Compiled, a: u32, b: u32| {
        conflict_between(
            out.node_access.row(a as usize),
            out.node_access.row(b as usize),
        )
    };
    // The ambiguities: conflicting pairs no declared ordering orders.
    for ai in 0..k {
        for bi in ai + 1..k {
            let (a, b) = (scratch.accessing[ai], scratch.accessing[bi]);
            let Some(what) = conflict(out, a, b) else {
                continue;
            };
            if !reaches(&scratch.reach, a, bi) && !reaches(&scratch.reach, b, ai) {
                out.ambiguities.push((a, b, what));
            }
        }
    }
    // Then their edges: for each node in declaration order, against the
    // nodes declared before it, nearest first, so that a chain of
    // conflicting nodes gets a chain of edges.
    for bi in 0..k {
        for ai in (0..bi).rev() {
            let (a, b) = (scratch.accessing[ai], scratch.accessing[bi]);
            if conflict(out, a, b).is_none()
                || reaches(&scratch.reach, a, bi)
                || reaches(&scratch.reach, b, ai)
            {
                continue;
            }
            scratch.edges.push((a, b));
            // Everything that reaches `a` (and `a`) now reaches `b` and all
            // it reaches.
            for x in 0..n as u32 {
                if x == a || reaches(&scratch.reach, x, ai) {
                    scratch.reach[x as usize * words + bi / 64] |= 1 << (bi % 64);
                    for w in 0..words {
                        let add = scratch.reach[b as usize * words + w];
                        scratch.reach[x as usize * words + w] |= add;
                    }
                }
            }
        }
    }
    // Each pair as the edges ordered it: by declaration, unless the edges
    // derived for other pairs had ordered it the other way already.
    for pair in out.ambiguities.iter_mut() {
        let (a, b, _) = *pair;
        let at_a = bit_of(scratch, a).expect("an ambiguous node accesses something");
        if reaches(&scratch.reach, b, at_a) {
            std::mem::swap(&mut pair.0, &mut pair.1);
        }
    }
    if input.ambiguities_are_errors && !out.ambiguities.is_empty() {
        return Err(GraphError::Ambiguous(
            out.ambiguities
                .iter()
                .map(|&(a, b, what)| {
                    (
                        input.nodes[a as usize].to_string(),
                        input.nodes[b as usize].to_string(),
                        what.to_owned(),
                    )
                })
                .collect(),
        ));
    }
    Ok(())
}

/// The node edges `(from, to)` sorted by `from` in `scratch.pairs`, and a
/// topological order of the nodes in `scratch.order`.
fn topo_for_reach(n: usize, scratch: &mut Scratch) {
    scratch.pairs.sort_unstable();
    scratch.pending.clear();
    scratch.pending.resize(n, 0);
    for &(_, to) in &scratch.pairs {
        scratch.pending[to as usize] += 1;
    }
    scratch.order.clear();
    let pending = &mut scratch.pending;
    scratch
        .order
        .extend((0..n as u32).filter(|&v| pending[v as usize] == 0));
    let mut next = 0;
    while next < scratch.order.len() {
        let v = scratch.order[next];
        next += 1;
        for &(_, to) in edges_from(&scratch.pairs, v) {
            pending[to as usize] -= 1;
            if pending[to as usize] == 0 {
                scratch.order.push(to);
            }
        }
    }
}

/// The edges from `v` in `pairs` (sorted by source).
fn edges_from(pairs: &[(u32, u32)], v: u32) -> &[(u32, u32)] {
    let first = pairs.partition_point(|&(from, _)| from < v);
    let last = pairs.partition_point(|&(from, _)| from <= v);
    &pairs[first..last]
}

/// Kahn's order of the final node graph.
fn topological_order(n: usize, out: &mut Compiled, scratch: &mut Scratch) {
    scratch.pending.clear();
    scratch
        .pending
        .extend((0..n).map(|i| out.dependencies.row(i).len() as u32));
    out.topological.clear();
    out.topological
        .extend((0..n as u32).filter(|&v| scratch.pending[v as usize] == 0));
    let mut next = 0;
    while next < out.topological.len() {
        let v = out.topological[next] as usize;
        next += 1;
        for &to in out.successors.row(v) {
            scratch.pending[to as usize] -= 1;
            if scratch.pending[to as usize] == 0 {
                out.topological.push(to);
            }
        }
    }
}
