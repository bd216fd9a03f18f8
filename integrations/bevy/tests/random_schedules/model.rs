//! The test's model of a schedule: which systems and sets exist, what is
//! in each set, their run conditions, and the orderings as bevy's graph
//! holds them; from it, the systems that must run and every ordered pair.

use super::{Cond, Label, Node, SystemSpec, FLAGS};
use std::collections::{BTreeMap, BTreeSet};

/// A span of positions, both ends included.
#[derive(Debug, Clone, Copy)]
pub(super) struct Span {
    pub(super) low: usize,
    pub(super) high: usize,
}

impl Span {
    pub(super) fn point(at: usize) -> Self {
        Span { low: at, high: at }
    }

    pub(super) fn cover(&mut self, other: Span) {
        self.low = self.low.min(other.low);
        self.high = self.high.max(other.high);
    }
}

pub(super) struct SystemModel {
    pub(super) alive: bool,
    pub(super) position: usize,
    /// Its own set and its groups.
    pub(super) parents: Vec<Label>,
    pub(super) conds: Vec<Cond>,
}

pub(super) struct SetModel {
    pub(super) alive: bool,
    pub(super) parents: Vec<Label>,
    pub(super) conds: Vec<Cond>,
    /// Everything ever in it, or the point given to it while it had
    /// nothing; only grows.
    pub(super) span: Option<Span>,
}

/// What the test knows of a schedule, as bevy's graph holds it.
#[derive(Default)]
pub(super) struct Model {
    pub(super) systems: Vec<SystemModel>,
    pub(super) sets: BTreeMap<Label, SetModel>,
    pub(super) edges: BTreeSet<(Node, Node)>,
}

impl Model {
    pub(super) fn span(&self, node: Node) -> Option<Span> {
        match node {
            Node::System(i) => Some(Span::point(self.systems[i].position)),
            Node::Set(label) => self.sets[&label].span,
        }
    }

    pub(super) fn parents(&self, node: Node) -> &[Label] {
        match node {
            Node::System(i) => &self.systems[i].parents,
            Node::Set(label) => &self.sets[&label].parents,
        }
    }

    /// Every live set `node` is in, directly or not.
    pub(super) fn ancestors(&self, node: Node) -> BTreeSet<Label> {
        let mut found = BTreeSet::new();
        let mut stack: Vec<Label> = self.parents(node).to_vec();
        while let Some(label) = stack.pop() {
            if self.sets[&label].alive && found.insert(label) {
                stack.extend(self.sets[&label].parents.iter().copied());
            }
        }
        found
    }

    pub(super) fn alive(&self, node: Node) -> bool {
        match node {
            Node::System(i) => self.systems[i].alive,
            Node::Set(label) => self.sets[&label].alive,
        }
    }

    /// Whether `from` before `to` keeps the graph acyclic and valid.
    pub(super) fn may_order(&self, from: Node, to: Node) -> bool {
        let (Some(a), Some(b)) = (self.span(from), self.span(to)) else {
            return false;
        };
        let related = |x: Node, y: Node| match y {
            Node::Set(label) => self.ancestors(x).contains(&label),
            Node::System(_) => false,
        };
        self.alive(from)
            && self.alive(to)
            && a.high < b.low
            && !related(from, to)
            && !related(to, from)
    }

    /// Grows the spans of `label` and the sets above it to cover `span`.
    pub(super) fn cover(&mut self, label: Label, span: Span) {
        let mut stack = vec![label];
        let mut seen = BTreeSet::new();
        while let Some(label) = stack.pop() {
            if !seen.insert(label) {
                continue;
            }
            let set = self.sets.get_mut(&label).unwrap();
            match &mut set.span {
                Some(s) => s.cover(span),
                None => set.span = Some(span),
            }
            stack.extend(set.parents.iter().copied());
        }
    }

    pub(super) fn add_system(&mut self, spec: &SystemSpec, position: usize) {
        assert_eq!(spec.id, self.systems.len());
        let own = Label::Own(spec.id);
        self.sets.insert(
            own,
            SetModel {
                alive: true,
                parents: Vec::new(),
                conds: Vec::new(),
                span: None,
            },
        );
        let mut parents = vec![own];
        parents.extend(spec.groups.iter().map(|g| Label::Group(*g)));
        for &label in &parents {
            self.cover(label, Span::point(position));
        }
        self.systems.push(SystemModel {
            alive: true,
            position,
            parents,
            conds: spec.conds.clone(),
        });
        let me = Node::System(spec.id);
        for &label in &spec.before {
            self.edges.insert((me, Node::Set(label)));
        }
        for &label in &spec.after {
            self.edges.insert((Node::Set(label), me));
        }
    }

    /// Takes `node` out of the orderings as bevy's removal does: its
    /// predecessors are ordered before its successors, and (for a set) its
    /// members join the sets it was in.
    pub(super) fn bridge(&mut self, node: Node) {
        let preds: Vec<Node> = self
            .edges
            .iter()
            .filter(|e| e.1 == node)
            .map(|e| e.0)
            .collect();
        let succs: Vec<Node> = self
            .edges
            .iter()
            .filter(|e| e.0 == node)
            .map(|e| e.1)
            .collect();
        for &p in &preds {
            for &s in &succs {
                self.edges.insert((p, s));
            }
        }
        self.edges.retain(|e| e.0 != node && e.1 != node);
        if let Node::Set(label) = node {
            let parents = self.sets[&label].parents.clone();
            let adopt = |list: &mut Vec<Label>| {
                if let Some(at) = list.iter().position(|l| *l == label) {
                    list.remove(at);
                    for p in &parents {
                        if !list.contains(p) {
                            list.push(*p);
                        }
                    }
                }
            };
            for set in self.sets.values_mut() {
                adopt(&mut set.parents);
            }
            for system in &mut self.systems {
                adopt(&mut system.parents);
            }
        }
    }

    /// The live systems in `label`, directly or not.
    pub(super) fn members(&self, label: Label) -> Vec<usize> {
        (0..self.systems.len())
            .filter(|&i| self.systems[i].alive && self.ancestors(Node::System(i)).contains(&label))
            .collect()
    }

    /// Removes what `remove_systems_in_set(label, ..)` removes; how many
    /// systems.
    pub(super) fn remove(&mut self, label: Label, keep_set: bool) -> usize {
        let members = self.members(label);
        for &i in &members {
            self.bridge(Node::System(i));
            self.systems[i].alive = false;
        }
        if !keep_set {
            self.bridge(Node::Set(label));
            self.sets.get_mut(&label).unwrap().alive = false;
        }
        members.len()
    }

    /// The systems that run with `flags`.
    pub(super) fn expected_to_run(&self, flags: &[bool; FLAGS]) -> Vec<usize> {
        (0..self.systems.len())
            .filter(|&i| {
                let system = &self.systems[i];
                system.alive
                    && system.conds.iter().all(|c| c.holds(flags))
                    && self
                        .ancestors(Node::System(i))
                        .iter()
                        .all(|set| self.sets[set].conds.iter().all(|c| c.holds(flags)))
            })
            .collect()
    }

    /// Every `(a, b)` of live systems with `a` before `b`: sets collapse
    /// into their systems, empty ones join their predecessors to their
    /// successors, and the result is closed transitively.
    pub(super) fn ordered_pairs(&self) -> Vec<(usize, usize)> {
        let mut edges: BTreeSet<(Node, Node)> = self.edges.clone();
        for (&label, set) in &self.sets {
            if !set.alive {
                continue;
            }
            let node = Node::Set(label);
            let members = self.members(label);
            let preds: Vec<Node> = edges.iter().filter(|e| e.1 == node).map(|e| e.0).collect();
            let succs: Vec<Node> = edges.iter().filter(|e| e.0 == node).map(|e| e.1).collect();
            edges.retain(|e| e.0 != node && e.1 != node);
            if members.is_empty() {
                for &p in &preds {
                    for &s in &succs {
                        edges.insert((p, s));
                    }
                }
            } else {
                for &m in &members {
                    for &p in &preds {
                        edges.insert((p, Node::System(m)));
                    }
                    for &s in &succs {
                        edges.insert((Node::System(m), s));
                    }
                }
            }
        }
        let n = self.systems.len();
        let mut next = vec![Vec::new(); n];
        for (a, b) in edges {
            match (a, b) {
                (Node::System(a), Node::System(b)) => next[a].push(b),
                other => panic!("a set is left after collapsing: {other:?}"),
            }
        }
        let mut pairs = Vec::new();
        for start in 0..n {
            let mut seen = vec![false; n];
            let mut stack = next[start].clone();
            while let Some(at) = stack.pop() {
                if !seen[at] {
                    seen[at] = true;
                    stack.extend(next[at].iter().copied());
                }
            }
            assert!(!seen[start], "the model has a cycle through {start}");
            pairs.extend((0..n).filter(|&b| seen[b]).map(|b| (start, b)));
        }
        pairs
    }
}
