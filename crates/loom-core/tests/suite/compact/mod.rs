//! Step compaction on the seed's examples and on real trajectories.

mod props;
mod research;
pub(crate) mod research_fixture;
mod traces;
pub(crate) mod trajectory;
