//! The simulated game's data: boids in struct-of-arrays form, a uniform grid
//! for the broad phase, and the per-frame outputs of the other systems.
//!
//! Every field is behind its own lock; the graph orders every writer of a
//! field before or after each other system that touches it, so the locks are
//! never contended and never held by two nodes that could run at once.

use std::sync::{Mutex, RwLock};

/// Side of the square world, in metres.
pub const WORLD_SIZE: f32 = 1_000.0;
/// Side of a broad-phase cell: the boids' interaction radius.
pub const CELL_SIZE: f32 = 10.0;
/// Cells per side.
pub const GRID: usize = (WORLD_SIZE / CELL_SIZE) as usize;
/// Audio samples mixed per frame (48 kHz at 60 Hz).
pub const AUDIO_SAMPLES: usize = 800;

pub type Vec2 = [f32; 2];

/// A boid's position and velocity, which the same systems write.
#[derive(Copy, Clone)]
pub struct Body {
    pub pos: Vec2,
    pub vel: Vec2,
}

/// Counting-sorted entity indices per grid cell.
pub struct Grid {
    /// `entities[start[c]..start[c + 1]]` are the boids in cell `c`.
    pub start: Vec<u32>,
    pub entities: Vec<u32>,
}

/// One draw call of the render list.
#[derive(Copy, Clone, Default)]
pub struct Draw {
    pub entity: u32,
    pub lod: u8,
    pub frame: u8,
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

pub struct World {
    pub dt: f32,
    pub input: Mutex<Vec2>,
    pub camera: Mutex<[f32; 4]>,
    pub bodies: RwLock<Vec<Body>>,
    pub acc: RwLock<Vec<Vec2>>,
    pub goal: RwLock<Vec<Vec2>>,
    pub cell: RwLock<Vec<u32>>,
    pub grid: RwLock<Grid>,
    pub anim: RwLock<Vec<f32>>,
    pub visible: RwLock<Vec<bool>>,
    pub lod: RwLock<Vec<u8>>,
    pub emitters: Mutex<Vec<f32>>,
    pub audio: Mutex<Vec<f32>>,
    pub effects: Mutex<Vec<(Vec2, f32)>>,
    pub draws: Mutex<Vec<Draw>>,
    pub telemetry: Mutex<f32>,
    pub hud: Mutex<Hud>,
    pub checksum: Mutex<u64>,
}

impl World {
    pub fn new(entities: usize) -> World {
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
        World {
            dt: 1.0 / 60.0,
            input: Mutex::new([0.0, 0.0]),
            camera: Mutex::new([0.0, 0.0, 400.0, 300.0]),
            bodies: RwLock::new(bodies),
            acc: RwLock::new(vec![[0.0; 2]; entities]),
            goal: RwLock::new(vec![[0.0; 2]; entities]),
            cell: RwLock::new(vec![0; entities]),
            grid: RwLock::new(Grid {
                start: vec![0; GRID * GRID + 1],
                entities: vec![0; entities],
            }),
            anim: RwLock::new(vec![0.0; entities]),
            visible: RwLock::new(vec![false; entities]),
            lod: RwLock::new(vec![0; entities]),
            emitters: Mutex::new(Vec::with_capacity(64)),
            audio: Mutex::new(vec![0.0; AUDIO_SAMPLES]),
            effects: Mutex::new(Vec::with_capacity(1024)),
            draws: Mutex::new(Vec::with_capacity(entities)),
            telemetry: Mutex::new(0.0),
            hud: Mutex::new(Hud::default()),
            checksum: Mutex::new(0),
        }
    }
}

pub fn cell_of(p: Vec2) -> usize {
    let cx = ((p[0] / CELL_SIZE) as usize).min(GRID - 1);
    let cy = ((p[1] / CELL_SIZE) as usize).min(GRID - 1);
    cy * GRID + cx
}
