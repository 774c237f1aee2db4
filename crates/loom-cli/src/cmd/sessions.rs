//! Placeholder until the foundation issue lands it.

use super::Context;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {}

pub(crate) fn run(_ctx: &Context, _args: Args) -> anyhow::Result<()> {
    anyhow::bail!("not implemented yet")
}
