//! The game's 22 systems, their sets and their order. Physics, AI,
//! animation, culling and LOD fan out with `parallel_chunks_mut`; input,
//! render preparation and presentation stay on the main thread; the network
//! snapshot runs every 30th frame (a run condition on its set), hands its
//! encoding to the background lane, and another system picks the result up
//! in a later frame.
//!
//! Every system declares the resources it reads and writes (`world.rs`) and
//! borrows them without a lock. The builder refuses conflicting systems
//! that no ordering orders (`Ambiguities::Error`), so every such pair below
//! is ordered on purpose, by an `after` or through the sets.

use crate::world::{
    cell_of, Accelerations, Animation, Audio, Bodies, Body, Camera, Cells, Checksum, Draw, Draws,
    Effects, Emitters, Goals, Grid, Hud, Input, Lods, Network, Telemetry, Vec2, Visible,
    AUDIO_SAMPLES, CELL_SIZE, DT, GRID, WORLD_SIZE,
};
use engine_tasks::graph::{Ambiguities, Resources};
use engine_tasks::{JoinHandle, Lane, NodeContext, TaskGraph};

/// Entities per parallel piece: large enough that a piece costs several
/// microseconds, small enough to spread over the threads.
const CHUNK: usize = 2048;
/// A network snapshot every this many frames (twice a second at 60 Hz).
pub const SNAPSHOT_EVERY: u64 = 30;
/// Audio samples per parallel piece of the mix.
const AUDIO_BLOCK: usize = 100;

type Cx<'a, 'f> = &'a NodeContext<'f, Resources>;

pub fn build() -> TaskGraph<Resources> {
    let mut g = TaskGraph::<Resources>::builder();
    g.ambiguities(Ambiguities::Error);
    let fc = Lane::FrameCritical;

    g.set("simulation").after(["input"]);
    g.set("render").after(["simulation", "camera"]);
    g.set("audio").after(["simulation", "camera"]);
    g.set("network")
        .after(["simulation", "network_collect"])
        .run_if(|cx| cx.frame() % SNAPSHOT_EVERY == 0);

    g.main_thread_node("input", input).writes::<Input>();
    g.node("camera", fc, camera)
        .after(["input"])
        .reads::<Input>()
        .writes::<Camera>();

    g.node("ai_goals", fc, ai_goals)
        .in_set("simulation")
        .reads::<Input>()
        .writes::<Goals>();
    g.node("broad_phase_cells", fc, broad_phase_cells)
        .in_set("simulation")
        .reads::<Bodies>()
        .writes::<Cells>();
    g.node("broad_phase_sort", fc, broad_phase_sort)
        .in_set("simulation")
        .after(["broad_phase_cells"])
        .reads::<Cells>()
        .writes::<Grid>();
    g.node("narrow_phase", fc, narrow_phase)
        .in_set("simulation")
        .after(["broad_phase_sort"])
        .reads::<Bodies>()
        .reads::<Grid>()
        .writes::<Accelerations>();
    g.node("ai_steer", fc, ai_steer)
        .in_set("simulation")
        .after(["narrow_phase", "ai_goals"])
        .reads::<Bodies>()
        .reads::<Goals>()
        .writes::<Accelerations>();
    g.node("integrate", fc, integrate)
        .in_set("simulation")
        .after(["ai_steer"])
        .reads::<Accelerations>()
        .writes::<Bodies>();
    g.node("obstacles", fc, obstacles)
        .in_set("simulation")
        .after(["integrate"])
        .writes::<Bodies>();

    g.node("animation", fc, animation)
        .in_set("render")
        .reads::<Bodies>()
        .writes::<Animation>();
    g.node("culling", fc, culling)
        .in_set("render")
        .reads::<Camera>()
        .reads::<Bodies>()
        .writes::<Visible>();
    g.node("lod", fc, lod)
        .in_set("render")
        .after(["culling"])
        .reads::<Camera>()
        .reads::<Bodies>()
        .reads::<Visible>()
        .writes::<Lods>();
    g.node("effects", fc, effects)
        .in_set("render")
        .reads::<Bodies>()
        .writes::<Effects>();
    g.main_thread_node("render_prep", render_prep)
        .in_set("render")
        .after(["lod", "animation"])
        .reads::<Visible>()
        .reads::<Lods>()
        .reads::<Animation>()
        .writes::<Draws>();

    g.node("audio_emitters", fc, audio_emitters)
        .in_set("audio")
        .reads::<Camera>()
        .reads::<Bodies>()
        .writes::<Emitters>();
    g.node("audio_mix", fc, audio_mix)
        .in_set("audio")
        .after(["audio_emitters"])
        .reads::<Emitters>()
        .writes::<Audio>();

    g.node("telemetry", Lane::Normal, telemetry)
        .after(["simulation"])
        .reads::<Bodies>()
        .writes::<Telemetry>();
    g.node("network_collect", fc, network_collect)
        .writes::<Network>()
        .writes::<Checksum>();
    g.node("network_snapshot", fc, network_snapshot)
        .in_set("network")
        .reads::<Bodies>()
        .writes::<Network>();

    g.node("ui", fc, ui)
        .after(["render", "audio", "telemetry", "network"])
        .reads::<Draws>()
        .reads::<Audio>()
        .reads::<Telemetry>()
        .reads::<Effects>()
        .reads::<Network>()
        .writes::<Hud>();
    g.node("frame_pacing", fc, |_| {});
    g.main_thread_node("present", present)
        .after(["ui", "frame_pacing"])
        .reads::<Draws>()
        .writes::<Checksum>();
    g.build().expect("the game's graph is valid")
}

/// Scripted "player input": the camera target circles the world.
fn input(cx: Cx) {
    let t = cx.frame() as f32 * 0.01;
    cx.res_mut::<Input>().0 = [
        WORLD_SIZE * (0.5 + 0.3 * t.cos()),
        WORLD_SIZE * (0.5 + 0.3 * t.sin()),
    ];
}

fn camera(cx: Cx) {
    let target = cx.res::<Input>().0;
    let mut cam = cx.res_mut::<Camera>();
    let cam = &mut cam.0;
    cam[0] += (target[0] - cam[0]) * 0.1;
    cam[1] += (target[1] - cam[1]) * 0.1;
}

fn ai_goals(cx: Cx) {
    let target = cx.res::<Input>().0;
    let mut goal = cx.res_mut::<Goals>();
    let goal = &mut goal.0;
    // Copied out: a node's context stays on the node's thread.
    let frame = cx.frame();
    cx.pool().parallel_chunks_mut(goal, CHUNK, |k, goals| {
        for (j, g) in goals.iter_mut().enumerate() {
            // A quarter of the flock follows the player, the rest wanders.
            let i = k * CHUNK + j;
            *g = if i % 4 == 0 {
                target
            } else {
                let a = (i as f32) * 0.37 + frame as f32 * 0.002;
                [
                    WORLD_SIZE * (0.5 + 0.4 * a.cos()),
                    WORLD_SIZE * (0.5 + 0.4 * a.sin()),
                ]
            };
        }
    });
}

fn broad_phase_cells(cx: Cx) {
    let bodies = cx.res::<Bodies>();
    let bodies = &bodies.0;
    let mut cell = cx.res_mut::<Cells>();
    let cell = &mut cell.0;
    cx.pool().parallel_chunks_mut(cell, CHUNK, |k, cells| {
        for (j, c) in cells.iter_mut().enumerate() {
            *c = cell_of(bodies[k * CHUNK + j].pos) as u32;
        }
    });
}

/// Counting sort of entities by cell (sequential: one pass of counting and
/// one of placing, a few hundred microseconds for 100k entities).
fn broad_phase_sort(cx: Cx) {
    let cell = cx.res::<Cells>();
    let cell = &cell.0;
    let mut grid = cx.res_mut::<Grid>();
    let grid = &mut *grid;
    grid.start.fill(0);
    for &c in cell.iter() {
        grid.start[c as usize + 1] += 1;
    }
    for c in 0..GRID * GRID {
        grid.start[c + 1] += grid.start[c];
    }
    // Place entities using `start` as cursors, then shift back.
    for (i, &c) in cell.iter().enumerate() {
        let slot = &mut grid.start[c as usize];
        grid.entities[*slot as usize] = i as u32;
        *slot += 1;
    }
    for c in (1..=GRID * GRID).rev() {
        grid.start[c] = grid.start[c - 1];
    }
    grid.start[0] = 0;
}

/// Separation, alignment and cohesion from the boids in the 3x3 cells
/// around each boid (at most 32 neighbours each).
fn narrow_phase(cx: Cx) {
    let bodies = cx.res::<Bodies>();
    let bodies = &bodies.0;
    let grid = cx.res::<Grid>();
    let mut acc = cx.res_mut::<Accelerations>();
    let acc = &mut acc.0;
    cx.pool().parallel_chunks_mut(acc, CHUNK / 4, |k, accs| {
        for (j, a) in accs.iter_mut().enumerate() {
            let i = k * (CHUNK / 4) + j;
            let p = bodies[i].pos;
            let (cx_, cy_) = ((p[0] / CELL_SIZE) as isize, (p[1] / CELL_SIZE) as isize);
            let (mut sep, mut align, mut centre, mut n) =
                ([0.0f32; 2], [0.0f32; 2], [0.0f32; 2], 0);
            'cells: for dy in -1..=1 {
                for dx in -1..=1 {
                    let (x, y) = (cx_ + dx, cy_ + dy);
                    if x < 0 || y < 0 || x >= GRID as isize || y >= GRID as isize {
                        continue;
                    }
                    let c = y as usize * GRID + x as usize;
                    for &o in &grid.entities[grid.start[c] as usize..grid.start[c + 1] as usize] {
                        let o = o as usize;
                        if o == i {
                            continue;
                        }
                        let other = bodies[o];
                        let d = [p[0] - other.pos[0], p[1] - other.pos[1]];
                        let d2 = d[0] * d[0] + d[1] * d[1];
                        if d2 > CELL_SIZE * CELL_SIZE {
                            continue;
                        }
                        let inv = 1.0 / (d2 + 0.01);
                        sep = [sep[0] + d[0] * inv, sep[1] + d[1] * inv];
                        align = [align[0] + other.vel[0], align[1] + other.vel[1]];
                        centre = [centre[0] + other.pos[0], centre[1] + other.pos[1]];
                        n += 1;
                        if n == 32 {
                            break 'cells;
                        }
                    }
                }
            }
            *a = if n == 0 {
                [0.0, 0.0]
            } else {
                let nf = n as f32;
                let v = bodies[i].vel;
                [
                    sep[0] * 2.0 + (align[0] / nf - v[0]) * 0.5 + (centre[0] / nf - p[0]) * 0.05,
                    sep[1] * 2.0 + (align[1] / nf - v[1]) * 0.5 + (centre[1] / nf - p[1]) * 0.05,
                ]
            };
        }
    });
}

fn ai_steer(cx: Cx) {
    let bodies = cx.res::<Bodies>();
    let bodies = &bodies.0;
    let goal = cx.res::<Goals>();
    let goal = &goal.0;
    let mut acc = cx.res_mut::<Accelerations>();
    let acc = &mut acc.0;
    cx.pool().parallel_chunks_mut(acc, CHUNK, |k, accs| {
        for (j, a) in accs.iter_mut().enumerate() {
            let i = k * CHUNK + j;
            let p = bodies[i].pos;
            let d = [goal[i][0] - p[0], goal[i][1] - p[1]];
            let len = (d[0] * d[0] + d[1] * d[1]).sqrt().max(1.0);
            a[0] += d[0] / len * 0.5;
            a[1] += d[1] / len * 0.5;
        }
    });
}

fn integrate(cx: Cx) {
    let dt = DT;
    let acc = cx.res::<Accelerations>();
    let acc = &acc.0;
    let mut bodies = cx.res_mut::<Bodies>();
    let bodies = &mut bodies.0;
    cx.pool().parallel_chunks_mut(bodies, CHUNK, |k, bodies| {
        for (j, b) in bodies.iter_mut().enumerate() {
            let a = acc[k * CHUNK + j];
            b.vel[0] = (b.vel[0] + a[0] * dt).clamp(-20.0, 20.0);
            b.vel[1] = (b.vel[1] + a[1] * dt).clamp(-20.0, 20.0);
            b.pos[0] = (b.pos[0] + b.vel[0] * dt).rem_euclid(WORLD_SIZE);
            b.pos[1] = (b.pos[1] + b.vel[1] * dt).rem_euclid(WORLD_SIZE);
        }
    });
}

/// Four round obstacles push boids out and reflect their velocity.
fn obstacles(cx: Cx) {
    const OBSTACLES: [(Vec2, f32); 4] = [
        ([250.0, 250.0], 40.0),
        ([750.0, 250.0], 60.0),
        ([250.0, 750.0], 50.0),
        ([750.0, 750.0], 30.0),
    ];
    let mut bodies = cx.res_mut::<Bodies>();
    let bodies = &mut bodies.0;
    cx.pool()
        .parallel_chunks_mut(bodies, CHUNK, |_, bodies| bounce(bodies, &OBSTACLES));
}

fn bounce(bodies: &mut [Body], obstacles: &[(Vec2, f32)]) {
    for Body { pos: p, vel: v } in bodies {
        for &(c, r) in obstacles {
            let d = [p[0] - c[0], p[1] - c[1]];
            let d2 = d[0] * d[0] + d[1] * d[1];
            if d2 < r * r && d2 > 0.0 {
                let len = d2.sqrt();
                let n = [d[0] / len, d[1] / len];
                *p = [c[0] + n[0] * r, c[1] + n[1] * r];
                let dot = v[0] * n[0] + v[1] * n[1];
                if dot < 0.0 {
                    *v = [v[0] - 2.0 * dot * n[0], v[1] - 2.0 * dot * n[1]];
                }
            }
        }
    }
}

fn animation(cx: Cx) {
    let bodies = cx.res::<Bodies>();
    let bodies = &bodies.0;
    let mut anim = cx.res_mut::<Animation>();
    let anim = &mut anim.0;
    cx.pool().parallel_chunks_mut(anim, CHUNK, |k, phases| {
        for (j, phase) in phases.iter_mut().enumerate() {
            let v = bodies[k * CHUNK + j].vel;
            let speed = (v[0] * v[0] + v[1] * v[1]).sqrt();
            *phase = (*phase + speed * DT * 2.0).fract();
        }
    });
}

fn culling(cx: Cx) {
    let cam = cx.res::<Camera>().0;
    let bodies = cx.res::<Bodies>();
    let bodies = &bodies.0;
    let mut visible = cx.res_mut::<Visible>();
    let visible = &mut visible.0;
    cx.pool().parallel_chunks_mut(visible, CHUNK, |k, vis| {
        for (j, v) in vis.iter_mut().enumerate() {
            let p = bodies[k * CHUNK + j].pos;
            *v = (p[0] - cam[0]).abs() < cam[2] && (p[1] - cam[1]).abs() < cam[3];
        }
    });
}

fn lod(cx: Cx) {
    let cam = cx.res::<Camera>().0;
    let bodies = cx.res::<Bodies>();
    let bodies = &bodies.0;
    let visible = cx.res::<Visible>();
    let visible = &visible.0;
    let mut lod = cx.res_mut::<Lods>();
    let lod = &mut lod.0;
    cx.pool().parallel_chunks_mut(lod, CHUNK, |k, lods| {
        for (j, l) in lods.iter_mut().enumerate() {
            let i = k * CHUNK + j;
            *l = if visible[i] {
                let p = bodies[i].pos;
                let d = (p[0] - cam[0]).abs().max((p[1] - cam[1]).abs());
                (d / 100.0).min(3.0) as u8
            } else {
                u8::MAX
            };
        }
    });
}

/// The 64 boids nearest the camera centre (by a coarse scan) are emitters.
fn audio_emitters(cx: Cx) {
    let cam = cx.res::<Camera>().0;
    let bodies = cx.res::<Bodies>();
    let bodies = &bodies.0;
    let mut emitters = cx.res_mut::<Emitters>();
    let emitters = &mut emitters.0;
    emitters.clear();
    for Body { pos: p, .. } in bodies.iter().step_by(16) {
        let d = ((p[0] - cam[0]).powi(2) + (p[1] - cam[1]).powi(2)).sqrt();
        if d < 150.0 && emitters.len() < emitters.capacity() {
            emitters.push(1.0 / (1.0 + d * 0.05));
        }
    }
}

fn audio_mix(cx: Cx) {
    let emitters = cx.res::<Emitters>();
    let emitters = &emitters.0;
    let mut audio = cx.res_mut::<Audio>();
    let audio = &mut audio.0;
    let base = cx.frame() as f32 * AUDIO_SAMPLES as f32;
    // Mixed in blocks, as an audio engine mixes: every emitter costs each
    // sample, so one block is tens of microseconds.
    cx.pool()
        .parallel_chunks_mut(audio, AUDIO_BLOCK, |k, block| {
            for (j, out) in block.iter_mut().enumerate() {
                let t = (base + (k * AUDIO_BLOCK + j) as f32) / 48_000.0;
                *out = emitters
                    .iter()
                    .enumerate()
                    .map(|(v, gain)| {
                        gain * (t * (220.0 + 20.0 * v as f32) * std::f32::consts::TAU).sin()
                    })
                    .sum::<f32>()
                    .tanh();
            }
        });
}

/// Sparks where boids hit the first obstacle; each lives half a second.
fn effects(cx: Cx) {
    let bodies = cx.res::<Bodies>();
    let bodies = &bodies.0;
    let mut fx = cx.res_mut::<Effects>();
    let fx = &mut fx.0;
    fx.retain_mut(|(_, life)| {
        *life -= DT;
        *life > 0.0
    });
    for Body { pos: p, .. } in bodies.iter().step_by(64) {
        let d2 = (p[0] - 250.0).powi(2) + (p[1] - 250.0).powi(2);
        if d2 < 42.0 * 42.0 && fx.len() < fx.capacity() {
            fx.push((*p, 0.5));
        }
    }
}

fn telemetry(cx: Cx) {
    let bodies = cx.res::<Bodies>();
    let bodies = &bodies.0;
    let sum: f32 = bodies.iter().map(|b| b.vel[0].hypot(b.vel[1])).sum();
    cx.res_mut::<Telemetry>().0 = sum / bodies.len().max(1) as f32;
}

/// Picks up the snapshot encoded since an earlier frame, if it is done; the
/// frame never waits for it.
fn network_collect(cx: Cx) {
    let mut network = cx.res_mut::<Network>();
    if network
        .in_flight
        .as_ref()
        .is_some_and(JoinHandle::is_finished)
    {
        let checksum = network.in_flight.take().unwrap().join().unwrap_or(0);
        network.sent += 1;
        cx.res_mut::<Checksum>().0 ^= checksum;
    }
}

/// In the frames its set's condition picks, encodes a snapshot of 1,024
/// positions on the background lane (unless the last is still encoding).
fn network_snapshot(cx: Cx) {
    let mut network = cx.res_mut::<Network>();
    if network.in_flight.is_some() {
        return;
    }
    let snapshot: Vec<Vec2> = cx
        .res::<Bodies>()
        .0
        .iter()
        .take(1024)
        .map(|b| b.pos)
        .collect();
    network.in_flight = cx
        .pool()
        .spawn(Lane::Background, move || {
            snapshot.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, p| {
                let bits = (p[0].to_bits() as u64) << 32 | p[1].to_bits() as u64;
                (h ^ bits).wrapping_mul(0x100_0000_01b3)
            })
        })
        .ok();
}

fn render_prep(cx: Cx) {
    let visible = cx.res::<Visible>();
    let visible = &visible.0;
    let lod = cx.res::<Lods>();
    let lod = &lod.0;
    let anim = cx.res::<Animation>();
    let anim = &anim.0;
    let mut draws = cx.res_mut::<Draws>();
    let draws = &mut draws.0;
    draws.clear();
    for (i, &v) in visible.iter().enumerate() {
        if v {
            draws.push(Draw {
                entity: i as u32,
                lod: lod[i],
                frame: (anim[i] * 8.0) as u8,
            });
        }
    }
    draws.sort_unstable_by_key(|d| d.lod);
}

fn ui(cx: Cx) {
    let mut hud = cx.res_mut::<Hud>();
    hud.visible = cx.res::<Draws>().0.len();
    hud.mean_speed = cx.res::<Telemetry>().0;
    hud.audio_peak = cx
        .res::<Audio>()
        .0
        .iter()
        .fold(0.0f32, |m, s| m.max(s.abs()));
    hud.effects = cx.res::<Effects>().0.len();
    hud.snapshots = cx.res::<Network>().sent;
}

/// Stands in for the GPU submission: folds the draw list into a checksum.
fn present(cx: Cx) {
    let sum = cx.res::<Draws>().0.iter().fold(0u64, |h, d| {
        h.rotate_left(5) ^ (d.entity as u64 | (d.lod as u64) << 32 | (d.frame as u64) << 40)
    });
    cx.res_mut::<Checksum>().0 ^= sum;
}
