//! Validation and topology: turns named nodes with `after` lists into index
//! arrays, or into a [`GraphError`] that names the nodes at fault.
//!
//! Cycles are found with Kahn's algorithm: repeatedly remove nodes with no
//! remaining dependency. Whatever is left lies on a cycle or behind one; every
//! left node has a left dependency, so walking dependencies from any of them
//! must revisit a node, and the walk between the two visits is a cycle.

use super::GraphError;
use std::collections::HashMap;

/// The dependency structure of a valid graph, in index form.
pub(super) struct Topology {
    /// `successors[successor_start[i]..successor_start[i + 1]]` are the nodes
    /// that run after node `i`, in declaration order.
    pub(super) successor_start: Box<[u32]>,
    pub(super) successors: Box<[u32]>,
    /// Number of distinct dependencies per node.
    pub(super) in_degree: Box<[u32]>,
    /// Every node, each after all of its dependencies.
    pub(super) topological: Box<[u32]>,
}

/// Most nodes a graph may have (indices are `u32`).
pub const MAX_NODES: usize = u32::MAX as usize - 1;

/// Resolves `names[i]`'s `after[i]` lists; see the module docs.
pub(super) fn topology(names: &[&str], after: &[&[String]]) -> Result<Topology, GraphError> {
    if names.len() > MAX_NODES {
        return Err(GraphError::TooManyNodes(names.len()));
    }
    let mut index = HashMap::with_capacity(names.len());
    for (i, &name) in names.iter().enumerate() {
        if index.insert(name, i as u32).is_some() {
            return Err(GraphError::DuplicateNode(name.to_owned()));
        }
    }
    let mut dependencies: Vec<Vec<u32>> = Vec::with_capacity(names.len());
    for (i, deps) in after.iter().enumerate() {
        let mut resolved = Vec::with_capacity(deps.len());
        for dep in deps.iter() {
            let Some(&d) = index.get(dep.as_str()) else {
                return Err(GraphError::UnknownDependency {
                    node: names[i].to_owned(),
                    dependency: dep.clone(),
                });
            };
            // A repeated dependency is one edge.
            if !resolved.contains(&d) {
                resolved.push(d);
            }
        }
        dependencies.push(resolved);
    }

    let n = names.len();
    let mut out_degree = vec![0u32; n + 1];
    for deps in &dependencies {
        for &d in deps {
            out_degree[d as usize] += 1;
        }
    }
    let mut successor_start = Vec::with_capacity(n + 1);
    let mut total = 0u32;
    for &degree in &out_degree[..n] {
        successor_start.push(total);
        total += degree;
    }
    successor_start.push(total);
    let mut fill = successor_start.clone();
    let mut successors = vec![0u32; total as usize];
    for (i, deps) in dependencies.iter().enumerate() {
        for &d in deps {
            successors[fill[d as usize] as usize] = i as u32;
            fill[d as usize] += 1;
        }
    }
    let in_degree: Vec<u32> = dependencies.iter().map(|d| d.len() as u32).collect();

    let mut remaining = in_degree.clone();
    let mut topological: Vec<u32> = (0..n as u32)
        .filter(|&i| remaining[i as usize] == 0)
        .collect();
    let mut next = 0;
    while next < topological.len() {
        let i = topological[next] as usize;
        next += 1;
        for &s in &successors[successor_start[i] as usize..successor_start[i + 1] as usize] {
            remaining[s as usize] -= 1;
            if remaining[s as usize] == 0 {
                topological.push(s);
            }
        }
    }
    if topological.len() < n {
        let cycle = find_cycle(&dependencies, &remaining);
        return Err(GraphError::Cycle(
            cycle
                .into_iter()
                .map(|i| names[i as usize].to_owned())
                .collect(),
        ));
    }
    Ok(Topology {
        successor_start: successor_start.into(),
        successors: successors.into(),
        in_degree: in_degree.into(),
        topological: topological.into(),
    })
}

/// A cycle among the nodes Kahn's algorithm could not remove, listed so that
/// each node runs after the one before it (and the first after the last).
fn find_cycle(dependencies: &[Vec<u32>], remaining: &[u32]) -> Vec<u32> {
    let stuck = |i: u32| remaining[i as usize] > 0;
    let start = (0..dependencies.len() as u32)
        .find(|&i| stuck(i))
        .expect("a stuck node exists when the sort is incomplete");
    let mut position = vec![usize::MAX; dependencies.len()];
    let mut walk = Vec::new();
    let mut node = start;
    while position[node as usize] == usize::MAX {
        position[node as usize] = walk.len();
        walk.push(node);
        node = *dependencies[node as usize]
            .iter()
            .find(|&&d| stuck(d))
            .expect("a stuck node has a stuck dependency");
    }
    // The walk went from each node to one of its dependencies; reverse it to
    // list the cycle in running order.
    let mut cycle = walk.split_off(position[node as usize]);
    cycle.reverse();
    cycle
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(spec: &[(&str, &[&str])]) -> Result<Topology, GraphError> {
        let names: Vec<&str> = spec.iter().map(|(n, _)| *n).collect();
        let after: Vec<Vec<String>> = spec
            .iter()
            .map(|(_, deps)| deps.iter().map(|d| d.to_string()).collect())
            .collect();
        let after: Vec<&[String]> = after.iter().map(Vec::as_slice).collect();
        topology(&names, &after)
    }

    #[test]
    fn orders_a_diamond() {
        let t = run(&[
            ("d", &["b", "c"]),
            ("b", &["a"]),
            ("c", &["a", "a"]),
            ("a", &[]),
        ])
        .unwrap();
        assert_eq!(&*t.in_degree, &[2, 1, 1, 0]);
        assert_eq!(&*t.topological, &[3, 1, 2, 0]);
        assert_eq!(&*t.successor_start, &[0, 0, 1, 2, 4]);
        assert_eq!(&*t.successors, &[0, 0, 1, 2]);
    }

    #[test]
    fn names_the_cycle_in_running_order() {
        let err = run(&[
            ("x", &[]),
            ("a", &["c", "x"]),
            ("b", &["a"]),
            ("c", &["b"]),
            ("tail", &["c"]),
        ])
        .err()
        .unwrap();
        let GraphError::Cycle(names) = err else {
            panic!("{err:?}")
        };
        // Any rotation of a -> b -> c is right; this walk starts at `a`.
        let mut rotated = names.clone();
        let at = rotated.iter().position(|n| n == "a").unwrap();
        rotated.rotate_left(at);
        assert_eq!(rotated, ["a", "b", "c"]);
    }

    #[test]
    fn self_dependency_is_a_cycle_of_one() {
        let err = run(&[("a", &["a"])]).err().unwrap();
        assert_eq!(err, GraphError::Cycle(vec!["a".into()]));
    }
}
