//! The simulated game's data: boids in struct-of-arrays form, a uniform grid
//! for the broad phase, and the per-frame outputs of the other systems.
//!
//! Each piece of data is a resource of the frame's [`Resources`]: a system
//! declares which it reads and writes, and the graph never runs a writer
//! beside another system that touches the same resource, so systems
//! borrow them without a lock (`systems.rs`).

use engine_tasks::graph::Resources;
use engine_tasks::JoinHandle;

/// Side of the square world, in metres.
pub const WORLD_SIZE: f32 = 1_000.0;
/// Side of a broad-phase cell: the boids' interaction radius.
pub const CELL_SIZE: f32 = 10.0;
/// Cells per side.
pub const GRID: usize = (WORLD_SIZE / CELL_SIZE) as usize;
/// Audio samples mixed per frame (48 kHz at 60 Hz).
pub const AUDIO_SAMPLES: usize = 800;
/// The simulation step, in seconds.
pub const DT: f32 = 1.0 / 60.0;

pub type Vec2 = [f32; 2];

/// A boid's position and velocity, which the same systems write.
#[derive(Copy, Clone)]
pub struct Body {
    pub pos: Vec2,
    pub vel: Vec2,
}

/// The scripted player's input: where the camera heads.
pub struct Input(pub Vec2);
/// The camera: centre and half extents.
pub struct Camera(pub [f32; 4]);
pub struct Bodies(pub Vec<Body>);
/// Each boid's acceleration this frame.
pub struct Accelerations(pub Vec<Vec2>);
/// Each boid's AI goal.
pub struct Goals(pub Vec<Vec2>);
/// Each boid's broad-phase cell.
pub struct Cells(pub Vec<u32>);

/// Counting-sorted entity indices per grid cell.
pub struct Grid {
    /// `entities[start[c]..start[c + 1]]` are the boids in cell `c`.
    pub start: Vec<u32>,
    pub entities: Vec<u32>,
}

/// Each boid's animation phase.
pub struct Animation(pub Vec<f32>);
pub struct Visible(pub Vec<bool>);
pub struct Lods(pub Vec<u8>);
/// The gains of this frame's sound emitters.
pub struct Emitters(pub Vec<f32>);
/// This frame's mixed audio samples.
pub struct Audio(pub Vec<f32>);
/// Sparks: where, and how long they still live.
pub struct Effects(pub Vec<(Vec2, f32)>);

/// One draw call of the render list.
#[derive(Copy, Clone, Default)]
pub struct Draw {
    pub entity: u32,
    pub lod: u8,
    pub frame: u8,
}

pub struct Draws(pub Vec<Draw>);
/// Mean speed of the flock.
pub struct Telemetry(pub f32);

/// The network snapshot being encoded on the background lane, and how many
/// were sent.
#[derive(Default)]
pub struct Network {
    pub in_flight: Option<JoinHandle<u64>>,
    pub sent: u64,
}

/// Heads-up display numbers.
#[derive(Default)]
pub struct Hud {
    pub visible: usize,
    pub mean_speed: f32,
    pub audio_peak: f32,
    pub effects: usize,
    pub snapshots: u64,
}

/// What the frames fold their output into.
pub struct Checksum(pub u64);

/// The world of `entities` boids, scattered by a fixed seed.
pub fn new_world(entities: usize) -> Resources {
    let mut seed = 0x2545_F491_4F6C_DD1Du64;
    let mut rand = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed >> 40) as f32 / (1u64 << 24) as f32
    };
    let bodies = (0..entities)
        .map(|_| Body {
            pos: [rand() * WORLD_SIZE, rand() * WORLD_SIZE],
            vel: [rand() * 2.0 - 1.0, rand() * 2.0 - 1.0],
        })
        .collect();
    let mut world = Resources::new();
    world.insert(Input([0.0, 0.0]));
    world.insert(Camera([0.0, 0.0, 400.0, 300.0]));
    world.insert(Bodies(bodies));
    world.insert(Accelerations(vec![[0.0; 2]; entities]));
    world.insert(Goals(vec![[0.0; 2]; entities]));
    world.insert(Cells(vec![0; entities]));
    world.insert(Grid {
        start: vec![0; GRID * GRID + 1],
        entities: vec![0; entities],
    });
    world.insert(Animation(vec![0.0; entities]));
    world.insert(Visible(vec![false; entities]));
    world.insert(Lods(vec![0; entities]));
    world.insert(Emitters(Vec::with_capacity(64)));
    world.insert(Audio(vec![0.0; AUDIO_SAMPLES]));
    world.insert(Effects(Vec::with_capacity(1024)));
    world.insert(Draws(Vec::with_capacity(entities)));
    world.insert(Telemetry(0.0));
    world.insert(Network::default());
    world.insert(Hud::default());
    world.insert(Checksum(0));
    world
}

pub fn cell_of(p: Vec2) -> usize {
    let cx = ((p[0] / CELL_SIZE) as usize).min(GRID - 1);
    let cy = ((p[1] / CELL_SIZE) as usize).min(GRID - 1);
    cy * GRID + cx
}
