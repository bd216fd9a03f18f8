//! A small deterministic game for bevy_ecs: 10,000 entities and 30 systems
//! (movement, AI, combat, economy, bookkeeping) with ordering edges, sets,
//! run conditions, commands and an exclusive system. Shared by the example
//! and the benchmark.

use bevy_ecs::prelude::*;

/// Entities spawned by [`world`].
pub const ENTITIES: usize = 10_000;

#[derive(Component, Clone, Copy)]
struct Pos(f32, f32);
#[derive(Component, Clone, Copy)]
struct Vel(f32, f32);
#[derive(Component)]
struct Health(f32);
#[derive(Component)]
struct Armor(f32);
#[derive(Component)]
struct Energy(f32);
#[derive(Component)]
struct Cooldown(f32);
#[derive(Component)]
struct Ammo(u32);
#[derive(Component)]
struct Target(f32, f32);
#[derive(Component)]
struct Gold(u32);
#[derive(Component)]
struct Age(u32);
#[derive(Component)]
struct Heat(f32);
#[derive(Component)]
struct Dead;

/// Frame counter and fixed time step.
#[derive(Resource, Default)]
pub struct Clock {
    /// Frames run so far.
    pub frame: u64,
}
/// Aggregates the systems compute each frame.
#[derive(Resource, Default, Debug)]
pub struct Stats {
    /// Living entities counted this frame.
    pub alive: u64,
    /// Entities despawned so far.
    pub despawned: u64,
    /// Entities spawned so far.
    pub spawned: u64,
    /// Sum of the gold of every entity.
    pub gold: u64,
    /// Sum of the energy of every entity.
    pub energy: f64,
    /// Sum of heat of every entity.
    pub heat: f64,
}
#[derive(Resource, Default)]
struct Wind(f32, f32);
#[derive(Resource, Default)]
struct Market(f32);

/// The game's phases, run in this order.
#[derive(SystemSet, Debug, Clone, PartialEq, Eq, Hash)]
pub enum GameSet {
    /// Input, clock and environment.
    Pre,
    /// AI and movement.
    Simulate,
    /// Damage, death, spawning.
    Combat,
    /// Statistics.
    Post,
}

/// A world with [`ENTITIES`] entities and the game's resources.
pub fn world() -> World {
    let mut world = World::new();
    world.init_resource::<Clock>();
    world.init_resource::<Stats>();
    world.init_resource::<Wind>();
    world.init_resource::<Market>();
    for i in 0..ENTITIES {
        let f = i as f32;
        let mut e = world.spawn((
            Pos(f % 100.0, f / 100.0),
            Vel(1.0, 0.5),
            Health(50.0 + f % 50.0),
            Energy(10.0),
            Target(0.0, 0.0),
            Age(0),
        ));
        if i % 2 == 0 {
            e.insert((Armor(f % 10.0), Cooldown(0.0), Ammo(30)));
        }
        if i % 3 == 0 {
            e.insert((Gold(0), Heat(0.0)));
        }
    }
    world
}

fn clock(mut c: ResMut<Clock>) {
    c.frame += 1;
}
fn wind(c: Res<Clock>, mut w: ResMut<Wind>) {
    let t = c.frame as f32 * 0.01;
    *w = Wind(t.sin() * 0.1, t.cos() * 0.1);
}
fn market(c: Res<Clock>, mut m: ResMut<Market>) {
    m.0 = 1.0 + (c.frame % 17) as f32 * 0.05;
}
fn age(mut q: Query<&mut Age>) {
    q.iter_mut().for_each(|mut a| a.0 += 1);
}
fn choose_target(c: Res<Clock>, mut q: Query<(&Pos, &mut Target)>) {
    let k = (c.frame % 64) as f32;
    q.iter_mut()
        .for_each(|(p, mut t)| *t = Target((p.0 + k) % 100.0, (p.1 * 1.5 + k) % 100.0));
}
fn steer(mut q: Query<(&Pos, &Target, &mut Vel)>) {
    q.iter_mut().for_each(|(p, t, mut v)| {
        v.0 = (t.0 - p.0) * 0.05;
        v.1 = (t.1 - p.1) * 0.05;
    });
}
fn apply_wind(w: Res<Wind>, mut q: Query<&mut Vel>) {
    q.iter_mut().for_each(|mut v| {
        v.0 += w.0;
        v.1 += w.1;
    });
}
fn limit_speed(mut q: Query<&mut Vel>) {
    q.iter_mut().for_each(|mut v| {
        v.0 = v.0.clamp(-2.0, 2.0);
        v.1 = v.1.clamp(-2.0, 2.0);
    });
}
fn integrate(mut q: Query<(&mut Pos, &Vel)>) {
    q.iter_mut().for_each(|(mut p, v)| {
        p.0 += v.0;
        p.1 += v.1;
    });
}
fn wrap(mut q: Query<&mut Pos>) {
    q.iter_mut().for_each(|mut p| {
        p.0 = p.0.rem_euclid(100.0);
        p.1 = p.1.rem_euclid(100.0);
    });
}
fn drain_energy(mut q: Query<(&Vel, &mut Energy)>) {
    q.iter_mut()
        .for_each(|(v, mut e)| e.0 = (e.0 - (v.0.abs() + v.1.abs()) * 0.01).max(0.0));
}
fn regen_energy(mut q: Query<&mut Energy>) {
    q.iter_mut().for_each(|mut e| e.0 = (e.0 + 0.02).min(10.0));
}
fn cool_down(mut q: Query<&mut Cooldown>) {
    q.iter_mut().for_each(|mut c| c.0 = (c.0 - 1.0).max(0.0));
}
fn fire(mut q: Query<(&mut Cooldown, &mut Ammo)>) {
    q.iter_mut().for_each(|(mut c, mut a)| {
        if c.0 == 0.0 && a.0 > 0 {
            a.0 -= 1;
            c.0 = 5.0;
        }
    });
}
fn reload(c: Res<Clock>, mut q: Query<&mut Ammo>) {
    if c.frame % 20 == 0 {
        q.iter_mut().for_each(|mut a| a.0 = 30);
    }
}
fn heat_up(mut q: Query<(&Vel, &mut Heat)>) {
    q.iter_mut()
        .for_each(|(v, mut h)| h.0 = h.0 * 0.9 + v.0.abs() + v.1.abs());
}
fn mine_gold(m: Res<Market>, mut q: Query<(&Pos, &mut Gold)>) {
    q.iter_mut().for_each(|(p, mut g)| {
        if (p.0 as u32 + p.1 as u32) % 7 == 0 {
            g.0 += m.0 as u32;
        }
    });
}
fn hazard(c: Res<Clock>, mut q: Query<(&Pos, &mut Health), Without<Armor>>) {
    let band = (c.frame % 100) as f32;
    q.iter_mut().for_each(|(p, mut h)| {
        if (p.1 - band).abs() < 1.0 {
            h.0 -= 3.0;
        }
    });
}
fn armored_hazard(mut q: Query<(&Pos, &Armor, &mut Health)>) {
    q.iter_mut().for_each(|(p, a, mut h)| {
        if p.0 < 5.0 {
            h.0 -= (2.0 - a.0 * 0.1).max(0.0);
        }
    });
}
fn overheat(mut q: Query<(&Heat, &mut Health)>) {
    q.iter_mut().for_each(|(heat, mut h)| {
        if heat.0 > 15.0 {
            h.0 -= 1.0;
        }
    });
}
fn heal(c: Res<Clock>, mut q: Query<(&Energy, &mut Health)>) {
    if c.frame % 4 == 0 {
        q.iter_mut()
            .for_each(|(e, mut h)| h.0 = (h.0 + e.0 * 0.05).min(100.0));
    }
}
fn mark_dead(mut commands: Commands, q: Query<(Entity, &Health), Without<Dead>>) {
    for (e, h) in &q {
        if h.0 <= 0.0 {
            commands.entity(e).insert(Dead);
        }
    }
}
fn despawn_dead(mut commands: Commands, q: Query<Entity, With<Dead>>, mut s: ResMut<Stats>) {
    for e in &q {
        commands.entity(e).despawn();
        s.despawned += 1;
    }
}
fn respawn(mut commands: Commands, c: Res<Clock>, mut s: ResMut<Stats>) {
    if c.frame % 10 == 0 {
        for i in 0..20 {
            let f = (c.frame + i) as f32;
            commands.spawn((
                Pos(f % 100.0, 50.0),
                Vel(0.0, 0.0),
                Health(60.0),
                Energy(10.0),
                Target(0.0, 0.0),
                Age(0),
            ));
            s.spawned += 1;
        }
    }
}
fn count_alive(q: Query<(), With<Health>>, mut s: ResMut<Stats>) {
    s.alive = q.iter().count() as u64;
}
fn total_gold(q: Query<&Gold>, mut s: ResMut<Stats>) {
    s.gold = q.iter().map(|g| u64::from(g.0)).sum();
}
fn total_energy(q: Query<&Energy>, mut s: ResMut<Stats>) {
    s.energy = q.iter().map(|e| f64::from(e.0)).sum();
}
fn total_heat(q: Query<&Heat>, mut s: ResMut<Stats>) {
    s.heat = q.iter().map(|h| f64::from(h.0)).sum();
}
fn oldest(q: Query<&Age>) {
    std::hint::black_box(q.iter().map(|a| a.0).max());
}
fn bounds_check(q: Query<&Pos>) {
    std::hint::black_box(q.iter().filter(|p| p.0 < 1.0).count());
}
fn end_of_frame(world: &mut World) {
    world.resource_mut::<Market>().0 *= 1.0;
}
fn is_even_frame(c: Res<Clock>) -> bool {
    c.frame % 2 == 0
}

/// The game's schedule: 30 systems in four chained sets.
pub fn schedule() -> Schedule {
    let mut s = Schedule::default();
    s.configure_sets(
        (
            GameSet::Pre,
            GameSet::Simulate,
            GameSet::Combat,
            GameSet::Post,
        )
            .chain(),
    );
    s.add_systems((clock, (wind, market).after(clock)).in_set(GameSet::Pre));
    s.add_systems(
        (
            age,
            choose_target,
            (steer, apply_wind, limit_speed, integrate, wrap)
                .chain()
                .after(choose_target),
            drain_energy.after(integrate),
            regen_energy.after(drain_energy),
            (cool_down, fire, reload).chain(),
            heat_up.after(limit_speed),
            mine_gold.after(wrap).run_if(is_even_frame),
        )
            .in_set(GameSet::Simulate),
    );
    s.add_systems(
        (
            (hazard, armored_hazard, overheat, heal).chain(),
            (mark_dead, despawn_dead).chain().after(heal),
            respawn,
        )
            .in_set(GameSet::Combat),
    );
    s.add_systems(
        (
            count_alive,
            total_gold,
            total_energy,
            total_heat,
            oldest,
            bounds_check,
            end_of_frame.after(total_heat),
        )
            .in_set(GameSet::Post),
    );
    s
}
