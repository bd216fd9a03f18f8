//! Where the frame went: the one instrumentation layer (`instrument.rs`)
//! that the scheduler calls at every task, node, steal, park, wait and
//! frame, and its two backends: Tracy (`tracy.rs`, with the `tracy`
//! feature; compiled out without it) and the built-in timeline recorder
//! (`timeline.rs`, switched on at run time). `profile.rs` gives code outside
//! the scheduler the same zones.

pub(crate) mod instrument;
pub mod profile;
pub mod timeline;
#[cfg(feature = "tracy-core")]
mod tracy;
