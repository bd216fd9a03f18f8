//! The overhead schedule: 256 empty systems in 16 layers of 16, every layer
//! after the previous one and each layer's systems chained in pairs. Shared
//! by the example and the benchmark.

use bevy_ecs::prelude::*;

#[derive(SystemSet, Debug, Clone, PartialEq, Eq, Hash)]
struct Layer(usize);

fn empty() {}

/// Builds the 256-system schedule.
pub fn schedule() -> Schedule {
    let mut s = Schedule::default();
    for layer in 0..16 {
        if layer > 0 {
            s.configure_sets(Layer(layer).after(Layer(layer - 1)));
        }
        for _ in 0..8 {
            s.add_systems((empty, empty).chain().in_set(Layer(layer)));
        }
    }
    s
}
