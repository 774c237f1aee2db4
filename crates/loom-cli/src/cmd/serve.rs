//! `loom serve`: the drop-in proxy and the HTTP API (see `loom-server` and docs/serve.md).
//!
//! Thin: resolves the configuration, opens the database (created if missing: a server starts on
//! an empty store), binds, prints `listening on http://ADDR` once on stdout, and serves until
//! SIGTERM or SIGINT, letting in-flight requests finish.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context as _;
use loom_server::{AuthMode, Engine, ServeArgs, ServeConfig};

use super::Context;
use crate::exit::bad_input;

/// Arguments of `loom serve`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Address to listen on (default 127.0.0.1:8080; port 0 picks a free one).
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,
    /// Config file (TOML): upstreams, tenants' upstream keys, limits, policy; see docs/serve.md.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// OpenAI upstream base URL, as the OpenAI SDK takes it (default https://api.openai.com/v1).
    #[arg(long, value_name = "URL")]
    upstream_openai: Option<String>,
    /// Anthropic upstream base URL, as the Anthropic SDK takes it (default https://api.anthropic.com).
    #[arg(long, value_name = "URL")]
    upstream_anthropic: Option<String>,
    /// Gemini API upstream base URL (default https://generativelanguage.googleapis.com).
    #[arg(long, value_name = "URL")]
    upstream_gemini: Option<String>,
    /// `none` (local single user; only on loopback) or `keys` (Loom keys; shared deployments).
    #[arg(long, value_name = "none|keys", value_parser = parse_auth)]
    auth: Option<AuthMode>,
    /// Keep no memory: no memory or knowledge-base endpoints, no indexing of appended sessions
    /// (memory is kept only in an SQLite database).
    #[arg(long)]
    no_memory: bool,
    #[command(flatten)]
    embedder: super::memory::EmbedderArg,
}

fn parse_auth(text: &str) -> Result<AuthMode, String> {
    AuthMode::parse(text).ok_or_else(|| format!("`{text}`: expected none or keys"))
}

pub(crate) fn run(ctx: &Context, args: Args) -> anyhow::Result<()> {
    let config = ServeConfig::resolve(
        ServeArgs {
            listen: args.listen,
            db: PathBuf::from(&ctx.db),
            config: args.config,
            upstream_openai: args.upstream_openai,
            upstream_anthropic: args.upstream_anthropic,
            upstream_gemini: args.upstream_gemini,
            auth: args.auth,
        },
        &|name| std::env::var(name).ok(),
    )
    .map_err(bad_input)?;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("LOOM_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .try_init();
    if config.auth == AuthMode::Keys {
        // A keyless upstream is legitimate (a local vLLM or Ollama), so this is a warning: a
        // hosted provider would answer every call with its 401.
        let mut err = std::io::stderr().lock();
        for (provider, upstream, var) in [
            (
                "openai",
                &config.openai,
                loom_server::config::OPENAI_KEY_ENV,
            ),
            (
                "anthropic",
                &config.anthropic,
                loom_server::config::ANTHROPIC_KEY_ENV,
            ),
            (
                "gemini",
                &config.gemini,
                loom_server::config::GEMINI_KEY_ENV,
            ),
        ] {
            if upstream.key.is_none() {
                writeln!(
                    err,
                    "warning: no upstream key for {provider} ({}): calls go without credentials; \
                     set {var} or a key_env in the config file",
                    upstream.base_url
                )?;
            }
        }
    }
    let registry = match &config.models {
        Some(path) => loom_tokens::Registry::with_user_file(path).map_err(bad_input)?,
        None => loom_tokens::Registry::built_in().context("loading the model registry")?,
    };
    let policy = super::replay::read_policy(config.policy.as_ref())?;
    let ws = ctx.open()?;
    let engine = Engine {
        registry,
        policy,
        reduce: loom_core::ReduceConfig::default(),
    };
    // The BPE tables the registry's models count with are built now, before the server listens,
    // rather than by the first calls (a second or more of CPU each, which every call arriving
    // meanwhile would wait for).
    let encodings: std::collections::BTreeSet<&str> = engine
        .registry
        .models()
        .iter()
        .filter_map(|m| match m.tokenizer {
            loom_tokens::TokenizerSpec::Bpe(encoding) => Some(encoding.name()),
            _ => None,
        })
        .collect();
    std::thread::scope(|scope| {
        for name in &encodings {
            if let Some(encoding) = loom_tokens::Encoding::from_name(name) {
                scope.spawn(move || encoding.count("warm"));
            }
        }
    });
    let listen = config.listen;
    let memory: Option<std::sync::Arc<dyn loom_memory::Memory>> = if args.no_memory {
        None
    } else {
        let memory: std::sync::Arc<dyn loom_memory::Memory> =
            super::memory::open_embedded(ctx, &args.embedder)?.into();
        // Items indexed before this embedder (or under another model) get their vectors in the
        // background: the server listens at once, and finds them by full text until then.
        let filling = std::sync::Arc::clone(&memory);
        std::thread::Builder::new()
            .name("loom-embed-missing".into())
            .spawn(move || match filling.embed_missing(None) {
                Ok(0) => {}
                Ok(items) => {
                    tracing::info!(items, "embedded the items indexed without this embedder")
                }
                Err(error) => tracing::warn!(
                    %error,
                    "embedding the items indexed without this embedder failed: they are found by \
                     full text until `loom memory index --embedder` embeds them"
                ),
            })
            .context("starting the thread that embeds earlier items")?;
        Some(memory)
    };
    let state = loom_server::state_with_memory(config, ws.store, ws.blobs, engine, memory)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .with_context(|| format!("listening on {listen}"))?;
        let addr = listener.local_addr()?;
        {
            let mut out = std::io::stdout().lock();
            writeln!(out, "listening on http://{addr}")?;
            out.flush()?;
        }
        loom_server::serve(state, listener, loom_server::shutdown_signal()).await?;
        anyhow::Ok(())
    })
}
