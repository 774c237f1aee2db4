//! `loom sessions`: list the sessions in the database, or delete one (`--delete ID`).

use std::io::Write;

use loom_store::Opened;

use super::Context;
use crate::exit::closed_pipe_is_fine;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Print a JSON list of `{id, agent, parent?, created_ms, event_count}` (with `--delete`,
    /// what was removed).
    #[arg(long)]
    json: bool,
    /// Delete this session: its log, receipts, summaries, steps and aliases, the memory items
    /// only it gave, and its folder of saved outputs (`recall = "files"`). Blobs stay.
    #[arg(long, value_name = "ID")]
    delete: Option<String>,
}

pub(crate) fn run(ctx: &Context, args: Args) -> anyhow::Result<()> {
    let ws = open_existing(ctx)?;
    if let Some(id) = &args.delete {
        return delete(ctx, &ws, id, args.json);
    }
    let sessions = ws.store.sessions()?;
    closed_pipe_is_fine(print(&sessions, args.json))
}

fn delete(ctx: &Context, ws: &Opened, id: &str, json: bool) -> anyhow::Result<()> {
    let session = loom_core::SessionId::new(id).map_err(crate::exit::bad_input)?;
    let live = loom_session::LiveSessions::new(1);
    let reduce = loom_core::ReduceConfig::default();
    let backend = loom_session::Backend {
        store: ws.store.as_ref(),
        blobs: ws.blobs.as_ref(),
        reduce: &reduce,
        live: &live,
    };
    let info =
        loom_session::history::delete_session(backend, &session).map_err(|e| match e.kind {
            loom_session::ErrorKind::SessionNotFound => crate::exit::bad_input(e),
            _ => anyhow::Error::new(e),
        })?;
    let database = ctx.database()?;
    let memory = loom_memory::open(&database).map_err(crate::exit::mapped)?;
    // Memory keeps a session's items under its agent; a session `loom serve` stored for a
    // tenant (`tenant/id`) under the tenant's name for the agent (`tenant/agent`).
    let mut agents = vec![info.agent.clone()];
    if let Some((tenant, _)) = id.split_once('/') {
        if let Ok(scoped) = loom_core::AgentId::new(format!("{tenant}/{}", info.agent)) {
            agents.push(scoped);
        }
    }
    let mut forgotten = 0;
    for agent in &agents {
        forgotten += memory
            .forget_session(agent, &session)
            .map_err(crate::exit::mapped)?
            .len();
    }
    let files = match &database {
        loom_store::Database::Sqlite(path) => loom_server::recall_files::remove_session(
            &loom_store::Workspace::folder_of(path).join("recall"),
            &session,
        )?,
        _ => false,
    };
    let mut out = std::io::stdout().lock();
    if json {
        let v = serde_json::json!({"id": id, "events": info.event_count,
            "memory_items_forgotten": forgotten, "files_removed": files});
        writeln!(out, "{v}")?;
    } else {
        writeln!(
            out,
            "deleted session {id}: {} events, {forgotten} memory items forgotten{}",
            info.event_count,
            if files {
                ", its saved outputs removed"
            } else {
                ""
            }
        )?;
    }
    Ok(())
}

fn print(sessions: &[loom_core::SessionInfo], json: bool) -> anyhow::Result<()> {
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    if json {
        serde_json::to_writer_pretty(&mut out, &sessions)?;
        writeln!(out)?;
        out.flush()?;
        return Ok(());
    }
    if sessions.is_empty() {
        writeln!(out, "no sessions")?;
        out.flush()?;
        return Ok(());
    }
    let agent_width = sessions
        .iter()
        .map(|s| s.agent.as_str().chars().count())
        .max()
        .unwrap_or(0)
        .max("AGENT".len());
    writeln!(
        out,
        "{:>7}  {:<agent_width$}  {:<20}  ID",
        "EVENTS", "AGENT", "CREATED (UTC)"
    )?;
    for s in sessions {
        writeln!(
            out,
            "{:>7}  {:<agent_width$}  {:<20}  {}",
            s.event_count,
            s.agent.as_str(),
            utc(s.created_ms),
            s.id
        )?;
    }
    out.flush()?;
    Ok(())
}

/// Opens the database for reading; a missing file is the user's mistake, not a reason to create
/// an empty database.
pub(crate) fn open_existing(ctx: &Context) -> anyhow::Result<Opened> {
    ctx.open_existing("run `loom import` first")
}

/// `YYYY-MM-DD HH:MM:SS` for UTC milliseconds.
pub(crate) fn utc(ms: i64) -> String {
    loom_core::time::utc_datetime(ms)
}

#[cfg(test)]
mod tests {
    use super::utc;

    #[test]
    fn formats_utc_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00:00");
        assert_eq!(utc(1_700_000_000_123), "2023-11-14 22:13:20");
        assert_eq!(utc(951_782_400_000), "2000-02-29 00:00:00");
    }
}
