//! `loom keys`: create, list and revoke the API keys `loom serve --auth keys` accepts.
//!
//! A key's secret is printed once, by `create`, and never again: the database keeps only its
//! hash, and no subcommand prints the hash either.

use std::io::Write;

use loom_core::AgentId;
use std::sync::Arc;

use loom_store::{new_api_key, ApiKey, ProxyMode, Store, StoreError, TenantId};
use serde_json::json;

use super::sessions::utc;
use super::Context;
use crate::exit::closed_pipe_is_fine;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    command: Keys,
}

#[derive(Debug, clap::Subcommand)]
enum Keys {
    /// Make a key for a tenant and print its secret: the only time it is shown.
    Create(CreateArgs),
    /// List every key (id, tenant, agent, mode, created, revoked); never a secret or a hash.
    List(ListArgs),
    /// Revoke a key by its id; the server refuses it from then on.
    Revoke(RevokeArgs),
}

#[derive(Debug, clap::Args)]
struct CreateArgs {
    /// The tenant the key belongs to: letters, digits, `_`, `.` and `-`.
    #[arg(long, value_parser = parse_tenant)]
    tenant: TenantId,
    /// Record the sessions the key creates under this agent.
    #[arg(long, value_parser = parse_agent)]
    agent: Option<AgentId>,
    /// How the proxy treats the key's requests unless a request says otherwise.
    #[arg(long, value_parser = ["fit", "observe"])]
    mode: Option<String>,
    /// Print one JSON object `{key, id, tenant, agent, mode, created_ms}`.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct ListArgs {
    /// Print a JSON list of `{id, tenant, agent, mode, created_ms, revoked_ms}`.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct RevokeArgs {
    /// The key's id (`key_...`), as `loom keys list` shows it.
    id: String,
    /// Print the revoked key as one JSON object, as `list --json` shows keys.
    #[arg(long)]
    json: bool,
}

fn parse_tenant(name: &str) -> Result<TenantId, StoreError> {
    TenantId::new(name)
}

fn parse_agent(name: &str) -> Result<AgentId, loom_core::LogError> {
    AgentId::new(name)
}

pub(crate) fn run(ctx: &Context, args: Args) -> anyhow::Result<()> {
    match args.command {
        Keys::Create(args) => create(ctx, args),
        Keys::List(args) => {
            let keys = open(ctx, false)?.keys()?;
            closed_pipe_is_fine(list(&keys, args.json))
        }
        Keys::Revoke(args) => {
            let key = open(ctx, false)?.revoke_key(&args.id, super::now_ms())?;
            closed_pipe_is_fine(revoked(&key, args.json))
        }
    }
}

/// Opens the database. Only `create` may make a new one: listing or revoking in a file that
/// does not exist is a mistaken `--db`, not an empty key list.
fn open(ctx: &Context, create: bool) -> anyhow::Result<Arc<dyn Store>> {
    let opened = if create {
        ctx.open()?
    } else {
        ctx.open_existing("`loom keys create` makes one")?
    };
    Ok(opened.store)
}

fn create(ctx: &Context, args: CreateArgs) -> anyhow::Result<()> {
    let mode = args
        .mode
        .as_deref()
        .map(str::parse::<ProxyMode>)
        .transpose()?;
    let store = open(ctx, true)?;
    let (secret, key) = new_api_key(args.tenant, args.agent, mode, super::now_ms())?;
    let stored = store.create_key(&key)?;
    let mut out = std::io::stdout().lock();
    if args.json {
        let k = &stored.key;
        let view = json!({
            "key": secret,
            "id": k.id,
            "tenant": k.tenant,
            "agent": k.agent,
            "mode": k.mode,
            "created_ms": k.created_ms,
        });
        serde_json::to_writer_pretty(&mut out, &view)?;
        writeln!(out)?;
    } else {
        writeln!(out, "{secret}")?;
    }
    out.flush()?;
    writeln!(
        std::io::stderr().lock(),
        "key {} for tenant {} created in {}; it is shown once",
        stored.key.id,
        stored.key.tenant,
        ctx.database()?
    )?;
    Ok(())
}

/// What may be shown of a stored key: everything but its hash.
fn public_view(key: &ApiKey) -> serde_json::Value {
    let k = &key.key;
    json!({
        "id": k.id,
        "tenant": k.tenant,
        "agent": k.agent,
        "mode": k.mode,
        "created_ms": k.created_ms,
        "revoked_ms": key.revoked_ms,
    })
}

fn list(keys: &[ApiKey], json: bool) -> anyhow::Result<()> {
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    if json {
        let views: Vec<_> = keys.iter().map(public_view).collect();
        serde_json::to_writer_pretty(&mut out, &views)?;
        writeln!(out)?;
        out.flush()?;
        return Ok(());
    }
    if keys.is_empty() {
        writeln!(out, "no keys")?;
        out.flush()?;
        return Ok(());
    }
    let rows: Vec<[String; 6]> = keys
        .iter()
        .map(|key| {
            let k = &key.key;
            [
                k.id.clone(),
                k.tenant.to_string(),
                k.agent.as_ref().map_or("-".into(), ToString::to_string),
                k.mode.map_or("-".into(), |m| m.as_str().to_owned()),
                utc(k.created_ms),
                key.revoked_ms.map_or("-".into(), utc),
            ]
        })
        .collect();
    let header = [
        "ID",
        "TENANT",
        "AGENT",
        "MODE",
        "CREATED (UTC)",
        "REVOKED (UTC)",
    ];
    let mut widths = header.map(|h| h.chars().count());
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: &mut dyn Iterator<Item = &str>| -> String {
        let padded: Vec<String> = cells
            .zip(widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        padded.join("  ").trim_end().to_owned()
    };
    writeln!(out, "{}", line(&mut header.iter().copied()))?;
    for row in &rows {
        writeln!(out, "{}", line(&mut row.iter().map(String::as_str)))?;
    }
    out.flush()?;
    Ok(())
}

fn revoked(key: &ApiKey, json: bool) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut out, &public_view(key))?;
        writeln!(out)?;
    } else {
        let since = key.revoked_ms.map_or("-".into(), utc);
        writeln!(
            out,
            "key {} of tenant {} is revoked (since {since} UTC)",
            key.key.id, key.key.tenant
        )?;
    }
    out.flush()?;
    Ok(())
}
