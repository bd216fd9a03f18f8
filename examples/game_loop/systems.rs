//! The game's 21 systems and their order. Physics, AI, animation, culling
//! and LOD fan out with `parallel_chunks_mut`/`parallel_for`; input,
//! render preparation and presentation stay on the main thread; the network
//! snapshot hands its encoding to the background lane and picks the result
//! up in a later frame.

use crate::world::{cell_of, Body, Draw, Vec2, World, AUDIO_SAMPLES, CELL_SIZE, GRID, WORLD_SIZE};
use engine_tasks::{JoinHandle, Lane, NodeContext, TaskGraph};

/// Entities per parallel piece: large enough that a piece costs several
/// microseconds, small enough to spread over the threads.
const CHUNK: usize = 2048;

type Cx<'a, 'f> = &'a NodeContext<'f, World>;

pub fn build() -> TaskGraph<World> {
    let mut g = TaskGraph::<World>::builder();
    let fc = Lane::FrameCritical;

    g.main_thread_node("input", input);
    g.node("camera", fc, camera).after(["input"]);
    g.node("ai_goals", fc, ai_goals).after(["input"]);
    g.node("broad_phase_cells", fc, broad_phase_cells);
    g.node("broad_phase_sort", fc, broad_phase_sort)
        .after(["broad_phase_cells"]);
    g.node("narrow_phase", fc, narrow_phase)
        .after(["broad_phase_sort"]);
    g.node("ai_steer", fc, ai_steer)
        .after(["narrow_phase", "ai_goals"]);
    g.node("integrate", fc, integrate).after(["ai_steer"]);
    g.node("obstacles", fc, obstacles).after(["integrate"]);
    g.node("animation", fc, animation).after(["obstacles"]);
    g.node("culling", fc, culling)
        .after(["obstacles", "camera"]);
    g.node("lod", fc, lod).after(["culling"]);
    g.node("audio_emitters", fc, audio_emitters)
        .after(["obstacles", "camera"]);
    g.node("audio_mix", fc, audio_mix).after(["audio_emitters"]);
    g.node("effects", fc, effects).after(["obstacles"]);
    g.node("telemetry", Lane::Normal, telemetry)
        .after(["obstacles"]);
    g.node("network_snapshot", fc, network_snapshot())
        .after(["obstacles"]);
    g.main_thread_node("render_prep", render_prep)
        .after(["lod", "animation", "effects"]);
    g.node("ui", fc, ui)
        .after(["render_prep", "audio_mix", "telemetry", "network_snapshot"]);
    g.node("frame_pacing", fc, |_| {});
    g.main_thread_node("present", present)
        .after(["ui", "frame_pacing"]);
    g.build().expect("the game's graph is valid")
}

/// Scripted "player input": the camera target circles the world.
fn input(cx: Cx) {
    let t = cx.frame() as f32 * 0.01;
    *cx.data().input.lock().unwrap() = [
        WORLD_SIZE * (0.5 + 0.3 * t.cos()),
        WORLD_SIZE * (0.5 + 0.3 * t.sin()),
    ];
}

fn camera(cx: Cx) {
    let target = *cx.data().input.lock().unwrap();
    let mut cam = cx.data().camera.lock().unwrap();
    cam[0] += (target[0] - cam[0]) * 0.1;
    cam[1] += (target[1] - cam[1]) * 0.1;
}

fn ai_goals(cx: Cx) {
    let target = *cx.data().input.lock().unwrap();
    let mut goal = cx.data().goal.write().unwrap();
    cx.pool().parallel_chunks_mut(&mut goal, CHUNK, |k, goals| {
        for (j, g) in goals.iter_mut().enumerate() {
            // A quarter of the flock follows the player, the rest wanders.
            let i = k * CHUNK + j;
            *g = if i % 4 == 0 {
                target
            } else {
                let a = (i as f32) * 0.37 + cx.frame() as f32 * 0.002;
                [
                    WORLD_SIZE * (0.5 + 0.4 * a.cos()),
                    WORLD_SIZE * (0.5 + 0.4 * a.sin()),
                ]
            };
        }
    });
}

fn broad_phase_cells(cx: Cx) {
    let bodies = cx.data().bodies.read().unwrap();
    let mut cell = cx.data().cell.write().unwrap();
    cx.pool().parallel_chunks_mut(&mut cell, CHUNK, |k, cells| {
        for (j, c) in cells.iter_mut().enumerate() {
            *c = cell_of(bodies[k * CHUNK + j].pos) as u32;
        }
    });
}

/// Counting sort of entities by cell (sequential: one pass of counting and
/// one of placing, a few hundred microseconds for 100k entities).
fn broad_phase_sort(cx: Cx) {
    let cell = cx.data().cell.read().unwrap();
    let mut grid = cx.data().grid.write().unwrap();
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
    let bodies = cx.data().bodies.read().unwrap();
    let grid = cx.data().grid.read().unwrap();
    let mut acc = cx.data().acc.write().unwrap();
    cx.pool()
        .parallel_chunks_mut(&mut acc, CHUNK / 4, |k, accs| {
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
                        for &o in &grid.entities[grid.start[c] as usize..grid.start[c + 1] as usize]
                        {
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
                        sep[0] * 2.0
                            + (align[0] / nf - v[0]) * 0.5
                            + (centre[0] / nf - p[0]) * 0.05,
                        sep[1] * 2.0
                            + (align[1] / nf - v[1]) * 0.5
                            + (centre[1] / nf - p[1]) * 0.05,
                    ]
                };
            }
        });
}

fn ai_steer(cx: Cx) {
    let bodies = cx.data().bodies.read().unwrap();
    let goal = cx.data().goal.read().unwrap();
    let mut acc = cx.data().acc.write().unwrap();
    cx.pool().parallel_chunks_mut(&mut acc, CHUNK, |k, accs| {
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
    let dt = cx.data().dt;
    let acc = cx.data().acc.read().unwrap();
    let mut bodies = cx.data().bodies.write().unwrap();
    cx.pool()
        .parallel_chunks_mut(&mut bodies, CHUNK, |k, bodies| {
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
    let mut bodies = cx.data().bodies.write().unwrap();
    cx.pool()
        .parallel_chunks_mut(&mut bodies, CHUNK, |_, bodies| bounce(bodies, &OBSTACLES));
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
    let dt = cx.data().dt;
    let bodies = cx.data().bodies.read().unwrap();
    let mut anim = cx.data().anim.write().unwrap();
    cx.pool()
        .parallel_chunks_mut(&mut anim, CHUNK, |k, phases| {
            for (j, phase) in phases.iter_mut().enumerate() {
                let v = bodies[k * CHUNK + j].vel;
                let speed = (v[0] * v[0] + v[1] * v[1]).sqrt();
                *phase = (*phase + speed * dt * 2.0).fract();
            }
        });
}

fn culling(cx: Cx) {
    let cam = *cx.data().camera.lock().unwrap();
    let bodies = cx.data().bodies.read().unwrap();
    let mut visible = cx.data().visible.write().unwrap();
    cx.pool()
        .parallel_chunks_mut(&mut visible, CHUNK, |k, vis| {
            for (j, v) in vis.iter_mut().enumerate() {
                let p = bodies[k * CHUNK + j].pos;
                *v = (p[0] - cam[0]).abs() < cam[2] && (p[1] - cam[1]).abs() < cam[3];
            }
        });
}

fn lod(cx: Cx) {
    let cam = *cx.data().camera.lock().unwrap();
    let bodies = cx.data().bodies.read().unwrap();
    let visible = cx.data().visible.read().unwrap();
    let mut lod = cx.data().lod.write().unwrap();
    cx.pool().parallel_chunks_mut(&mut lod, CHUNK, |k, lods| {
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
    let cam = *cx.data().camera.lock().unwrap();
    let bodies = cx.data().bodies.read().unwrap();
    let mut emitters = cx.data().emitters.lock().unwrap();
    emitters.clear();
    for Body { pos: p, .. } in bodies.iter().step_by(16) {
        let d = ((p[0] - cam[0]).powi(2) + (p[1] - cam[1]).powi(2)).sqrt();
        if d < 150.0 && emitters.len() < emitters.capacity() {
            emitters.push(1.0 / (1.0 + d * 0.05));
        }
    }
}

fn audio_mix(cx: Cx) {
    let emitters = cx.data().emitters.lock().unwrap();
    let mut audio = cx.data().audio.lock().unwrap();
    let base = cx.frame() as f32 * AUDIO_SAMPLES as f32;
    for (s, out) in audio.iter_mut().enumerate() {
        let t = (base + s as f32) / 48_000.0;
        *out = emitters
            .iter()
            .enumerate()
            .map(|(v, gain)| gain * (t * (220.0 + 20.0 * v as f32) * std::f32::consts::TAU).sin())
            .sum::<f32>()
            .tanh();
    }
}

/// Sparks where boids hit the first obstacle; each lives half a second.
fn effects(cx: Cx) {
    let dt = cx.data().dt;
    let bodies = cx.data().bodies.read().unwrap();
    let mut fx = cx.data().effects.lock().unwrap();
    fx.retain_mut(|(_, life)| {
        *life -= dt;
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
    let bodies = cx.data().bodies.read().unwrap();
    let sum: f32 = bodies.iter().map(|b| b.vel[0].hypot(b.vel[1])).sum();
    *cx.data().telemetry.lock().unwrap() = sum / bodies.len().max(1) as f32;
}

/// Every 30 frames, encodes a snapshot of 1,024 positions on the background
/// lane; the checksum arrives in a later frame and the frame never waits.
fn network_snapshot() -> impl FnMut(Cx) + Send + 'static {
    let mut in_flight: Option<JoinHandle<u64>> = None;
    let mut sent = 0u64;
    move |cx: Cx| {
        if in_flight.as_ref().is_some_and(JoinHandle::is_finished) {
            let checksum = in_flight.take().unwrap().join().unwrap_or(0);
            sent += 1;
            let mut hud = cx.data().hud.lock().unwrap();
            hud.snapshots = sent;
            *cx.data().checksum.lock().unwrap() ^= checksum;
        }
        if in_flight.is_none() && cx.frame() % 30 == 0 {
            let bodies = cx.data().bodies.read().unwrap();
            let snapshot: Vec<Vec2> = bodies.iter().take(1024).map(|b| b.pos).collect();
            in_flight = cx
                .pool()
                .spawn(Lane::Background, move || {
                    snapshot.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, p| {
                        let bits = (p[0].to_bits() as u64) << 32 | p[1].to_bits() as u64;
                        (h ^ bits).wrapping_mul(0x100_0000_01b3)
                    })
                })
                .ok();
        }
    }
}

fn render_prep(cx: Cx) {
    let visible = cx.data().visible.read().unwrap();
    let lod = cx.data().lod.read().unwrap();
    let anim = cx.data().anim.read().unwrap();
    let mut draws = cx.data().draws.lock().unwrap();
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
    let draws = cx.data().draws.lock().unwrap();
    let audio = cx.data().audio.lock().unwrap();
    let mut hud = cx.data().hud.lock().unwrap();
    hud.visible = draws.len();
    hud.mean_speed = *cx.data().telemetry.lock().unwrap();
    hud.audio_peak = audio.iter().fold(0.0f32, |m, s| m.max(s.abs()));
    hud.effects = cx.data().effects.lock().unwrap().len();
}

/// Stands in for the GPU submission: folds the draw list into a checksum.
fn present(cx: Cx) {
    let draws = cx.data().draws.lock().unwrap();
    let sum = draws.iter().fold(0u64, |h, d| {
        h.rotate_left(5) ^ (d.entity as u64 | (d.lod as u64) << 32 | (d.frame as u64) << 40)
    });
    *cx.data().checksum.lock().unwrap() ^= sum;
}
