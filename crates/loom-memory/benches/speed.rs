//! Indexing rate and search latency over a synthetic memory of one agent (issue 18 targets:
//! search p99 under 20 ms over 100,000 items; indexing at least 5,000 items/s).
//!
//! A plain harness rather than criterion: the target is a tail latency (p99) over many
//! different queries, which criterion's mean-of-iterations does not report.
//!
//! `cargo bench -p loom-memory --bench speed -- [--items N] [--queries N] [--file]
//! [--db postgres://…] [--keep] [--vectors DIMS] [--embedder SPEC]`
//!
//! - `--file` writes to an SQLite file in a temporary folder instead of RAM;
//! - `--db postgres://…` writes to a PostgreSQL database instead, in a schema of its own that is
//!   dropped at the end (the URL's own `schema=` is ignored), or kept for a look at its plans
//!   with `--keep` (the run prints its URL);
//!   searches are timed after a `VACUUM ANALYZE` of the written tables (autovacuum's work after
//!   a bulk write, done before rather than racing the searches);
//! - `--embedder SPEC` adds a real embedder (`local:PATH`, as `loom serve --embedder` loads it):
//!   indexing then includes embedding every item, and each search embeds its query;
//! - `--vectors DIMS` adds an embedder of that many dimensions (made-up unit vectors, derived from
//!   each text's hash, so that embedding costs nothing and only the vector search is measured).

use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context as _};
use loom_core::{AgentId, SessionId};
use loom_memory::{
    EmbedError, Embedder, Filters, ItemKind, Memory, NewItem, PgMemory, Provenance, Search,
    SqliteMemory, Tier,
};

/// Unit vectors of `dims` numbers made from a text's hash: as costly to store and compare as a
/// real model's, free to make.
#[derive(Debug)]
struct Hashed {
    dims: usize,
    id: String,
}

impl Embedder for Hashed {
    fn model_id(&self) -> &str {
        &self.id
    }

    fn dimensions(&self) -> Option<usize> {
        Some(self.dims)
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts
            .iter()
            .map(|t| {
                let mut rng = Rng(t.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
                    (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
                }) | 1);
                let mut v: Vec<f32> = (0..self.dims)
                    .map(|_| (rng.next() % 2_001) as f32 / 1_000.0 - 1.0)
                    .collect();
                let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-9);
                v.iter_mut().for_each(|x| *x /= norm);
                v
            })
            .collect())
    }
}

/// A PostgreSQL schema made for one run, dropped when the run ends.
struct PgSchema {
    base: String,
    name: String,
}

impl PgSchema {
    fn create(url: &str) -> anyhow::Result<Self> {
        let base = match url.split_once('?') {
            Some((base, _)) => base.to_owned(),
            None => url.to_owned(),
        };
        let name = format!("loom_bench_{}", std::process::id());
        let mut client = postgres::Client::connect(&base, postgres::NoTls)
            .with_context(|| format!("connecting to {base}"))?;
        client.batch_execute(&format!("CREATE SCHEMA {name}"))?;
        Ok(Self { base, name })
    }

    fn url(&self) -> String {
        format!("{}?schema={}", self.base, self.name)
    }
}

impl Drop for PgSchema {
    fn drop(&mut self) {
        if let Ok(mut client) = postgres::Client::connect(&self.base, postgres::NoTls) {
            let _ = client.batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name));
        }
    }
}

/// A small deterministic generator (xorshift), so every run writes the same items.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// A word from a vocabulary with a long tail: a few words are very common, most are rare,
    /// as in real text.
    fn word(&mut self, vocab: &[String]) -> String {
        let r = (self.next() % 1_000_000) as f64 / 1_000_000.0;
        let i = ((vocab.len() as f64).powf(r) as usize).saturating_sub(1);
        vocab[i.min(vocab.len() - 1)].clone()
    }
}

fn main() -> anyhow::Result<()> {
    let (mut n_items, mut n_queries, mut file, mut keep) = (100_000usize, 2_000usize, false, false);
    let (mut db, mut dims): (Option<String>, Option<usize>) = (None, None);
    let mut spec: Option<String> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--items" => n_items = args.next().context("--items N")?.parse()?,
            "--queries" => n_queries = args.next().context("--queries N")?.parse()?,
            "--file" => file = true,
            "--keep" => keep = true,
            "--db" => db = Some(args.next().context("--db postgres://…")?),
            "--vectors" => dims = Some(args.next().context("--vectors DIMS")?.parse()?),
            "--embedder" => spec = Some(args.next().context("--embedder SPEC")?),
            "--bench" => {}
            other => bail!("unknown argument `{other}`"),
        }
    }
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let syllables = [
        "ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "pa", "do", "fi",
    ];
    // The head of a natural vocabulary is function words, as in real text (where a search
    // drops them); the rest is made-up words with a long tail.
    let function_words = [
        "the", "of", "and", "a", "to", "in", "is", "you", "that", "it", "he", "was", "for", "on",
        "are", "as", "with", "his", "they", "i", "at", "be", "this", "have", "from", "or", "had",
        "by", "but", "what", "some", "we", "can", "out", "other", "were", "all", "there", "when",
        "up", "your", "how", "said", "an", "each", "she", "which", "do", "their", "if",
    ];
    let made_up = (0..20_000).map(|_| {
        let n = 2 + rng.next() % 3;
        (0..n)
            .map(|_| syllables[(rng.next() % 12) as usize])
            .collect::<String>()
    });
    let made_up: Vec<String> = made_up.collect();
    let vocab: Vec<String> = function_words
        .iter()
        .map(|w| (*w).to_owned())
        .chain(made_up)
        .collect();
    let agent = AgentId::new("bench")?;
    let items: Vec<NewItem> = (0..n_items)
        .map(|i| {
            let len = 8 + (rng.next() % 30) as usize;
            let text: Vec<String> = (0..len).map(|_| rng.word(&vocab)).collect();
            let session =
                SessionId::new(format!("s{}", i / 500)).unwrap_or_else(|_| unreachable!());
            NewItem {
                agent: agent.clone(),
                tier: Tier::L4,
                kind: ItemKind::User,
                text: text.join(" "),
                source: Provenance {
                    session,
                    from_seq: (i % 500) as u64 + 1,
                    to_seq: (i % 500) as u64 + 1,
                    ts_ms: i as i64,
                },
            }
        })
        .collect();

    let dir = tempfile::tempdir()?;
    let embedder: Option<Arc<dyn Embedder>> = match &spec {
        Some(spec) => loom_memory::embedder_from_spec(spec)?,
        None => dims.map(|dims| {
            Arc::new(Hashed {
                dims,
                id: format!("hashed-{dims}"),
            }) as Arc<dyn Embedder>
        }),
    };
    let embedded = embedder
        .as_ref()
        .map(|e| format!(", vectors of {}", e.model_id()));
    let mut schema = None;
    let (memory, place): (Box<dyn Memory>, &str) = match &db {
        Some(url) if url.starts_with("postgres") => {
            let s = schema.insert(PgSchema::create(url)?);
            let m = PgMemory::open(&s.url())?;
            let m = match embedder {
                Some(e) => m.with_embedder(e),
                None => m,
            };
            (Box::new(m), "PostgreSQL")
        }
        Some(other) => bail!("--db takes a postgres:// URL, not `{other}`"),
        None => {
            let m = if file {
                SqliteMemory::open(dir.path().join("bench.db"))?
            } else {
                SqliteMemory::open_in_memory()?
            };
            let m = match embedder {
                Some(e) => m.with_embedder(e),
                None => m,
            };
            (Box::new(m), if file { "SQLite file" } else { "in RAM" })
        }
    };
    let started = Instant::now();
    // Written in batches, as `index` writes one session's items per transaction.
    for chunk in items.chunks(500) {
        memory.write(chunk)?;
    }
    let secs = started.elapsed().as_secs_f64();
    let rate = n_items as f64 / secs;
    // PostgreSQL's autovacuum analyses the tables and flushes the full-text index's pending
    // list soon after a bulk write; searches are measured after it, in the steady state a
    // server runs in, not while it races them.
    if let Some(s) = &schema {
        let mut client = postgres::Client::connect(&s.base, postgres::NoTls)?;
        client.batch_execute(&format!("SET search_path = {}", s.name))?;
        // One statement: several would run as one transaction, which VACUUM refuses.
        client.batch_execute("VACUUM ANALYZE memory_items, memory_sources, memory_terms")?;
    }

    let mut lat = Vec::with_capacity(n_queries);
    let mut returned = 0;
    for _ in 0..n_queries {
        let len = 3 + (rng.next() % 6) as usize;
        let q: Vec<String> = (0..len).map(|_| rng.word(&vocab)).collect();
        let search = Search {
            filters: Filters {
                agent: Some(agent.clone()),
                ..Filters::default()
            },
            ..Search::new(q.join(" "), 1000)
        };
        let t = Instant::now();
        returned += memory.search(&search)?.len();
        lat.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    lat.sort_by(f64::total_cmp);
    let pct = |p: f64| {
        let i = ((lat.len() as f64 * p) as usize).min(lat.len().saturating_sub(1));
        lat.get(i).copied().unwrap_or(0.0)
    };
    let report = format!(
        "{n_items} items ({place}{}): indexed in {secs:.2} s = {rate:.0} items/s\n\
         {n_queries} searches (budget 1000, {:.1} hits avg): p50 {:.2} ms, p90 {:.2} ms, \
         p99 {:.2} ms, max {:.2} ms\n",
        embedded.unwrap_or_default(),
        returned as f64 / n_queries.max(1) as f64,
        pct(0.50),
        pct(0.90),
        pct(0.99),
        lat.last().copied().unwrap_or(0.0),
    );
    std::io::Write::write_all(&mut std::io::stdout(), report.as_bytes())?;
    drop(memory);
    match schema {
        Some(s) if keep => {
            std::io::Write::write_all(
                &mut std::io::stdout(),
                format!("kept: {}\n", s.url()).as_bytes(),
            )?;
            std::mem::forget(s);
        }
        s => drop(s),
    }
    Ok(())
}
