//! Evidence recall on LoCoMo within a token budget, with no embedder or with one (issue 18,
//! "Measure on a real benchmark"; issue 31, "One measure, stated").
//!
//! Each conversation of `../shared/memory/locomo-dev.json` (beside the repository) is imported
//! as one agent: one Loom session per LoCoMo session, its turns in order as user events
//! `"Speaker: text"` (a shared photo's caption appended, as the published anchor does), each
//! at the session's date. The sessions are indexed into L4 memory with [`loom_memory::index`]
//! and every question of categories 1–4 is searched under the agent's memory as a user's
//! `loom memory search --budget N` would (the default limit, which the budget sets). An evidence
//! turn is found when some hit names it as a source. Two measures:
//!
//! - **pooled**: evidence turns found over all evidence turns, every question's turns pooled
//!   (a question with four evidence turns weighs four times one with one);
//! - **per question**: the mean over questions of the share of its evidence turns found.
//!
//! With `--baseline`, the same questions go to the simple hybrid that issue 31 measured Loom
//! against instead of to Loom: BM25 over the raw turns (lowercased words, no stemming) and,
//! with an embedder, cosine similarity to the question over the raw turns, fused by reciprocal
//! rank (1/(60 + rank) over each list's first 100), each hit followed by the turns before and
//! after it in its session, packed greedily under the budget (a turn that does not fit is
//! skipped).
//!
//! `cargo run --release -p loom-memory --example locomo -- [--budget N]... [--data FILE]
//! [--embedder none|openai:MODEL|local:PATH] [--db FILE] [--baseline]`

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context as _};
use loom_core::{AgentId, EventBody, MessageContent, NewEvent, Seq, SessionId};
use loom_memory::{embedder_from_spec, index, Filters, Memory, Search, SqliteMemory};
use loom_store::{MemoryStore, NewSession, Store};
use serde_json::Value;

const DATA: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../../shared/memory/locomo-dev.json"
);
const BUDGETS: [u64; 3] = [500, 1000, 2000];
const CATEGORIES: [(u64, &str); 4] = [
    (1, "multi-hop"),
    (2, "temporal"),
    (3, "open-domain"),
    (4, "single-hop"),
];

/// "1:56 pm on 8 May, 2023" as UTC milliseconds.
fn parse_date(s: &str) -> anyhow::Result<i64> {
    let (time, date) = s.split_once(" on ").context("no ` on ` in the date")?;
    let (hm, ampm) = time.trim().split_once(' ').context("no am/pm")?;
    let (h, m) = hm.split_once(':').context("no h:m")?;
    let (mut h, m): (i64, i64) = (h.parse()?, m.parse()?);
    if ampm.eq_ignore_ascii_case("pm") && h != 12 {
        h += 12;
    } else if ampm.eq_ignore_ascii_case("am") && h == 12 {
        h = 0;
    }
    let parts: Vec<&str> = date.split([' ', ',']).filter(|p| !p.is_empty()).collect();
    let [day, month, year] = parts[..] else {
        bail!("date `{date}`")
    };
    const MONTHS: [&str; 12] = [
        "january",
        "february",
        "march",
        "april",
        "may",
        "june",
        "july",
        "august",
        "september",
        "october",
        "november",
        "december",
    ];
    let month = MONTHS
        .iter()
        .position(|x| x.eq_ignore_ascii_case(month))
        .context("month")? as i64
        + 1;
    let (y, d): (i64, i64) = (year.parse()?, day.parse()?);
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Ok(((days * 24 + h) * 60 + m) * 60_000)
}

struct Conversation {
    agent: AgentId,
    /// dia_id → (session, seq).
    turns: HashMap<String, (SessionId, Seq)>,
    /// (category, evidence dia_ids, question).
    questions: Vec<(u64, Vec<String>, String)>,
    /// Every turn's session, seq and text, in order.
    texts: Vec<(SessionId, Seq, String)>,
}

fn load(store: &MemoryStore, conv: &Value) -> anyhow::Result<Conversation> {
    let id = conv["sample_id"].as_str().context("sample_id")?;
    let agent = AgentId::new(id)?;
    let c = &conv["conversation"];
    let mut turns = HashMap::new();
    let mut texts = Vec::new();
    let mut n = 1;
    while let Some(list) = c.get(format!("session_{n}")).and_then(Value::as_array) {
        let date = c[format!("session_{n}_date_time")]
            .as_str()
            .context("date")?;
        let ts = parse_date(date).with_context(|| format!("{id} session {n}: {date}"))?;
        let session = SessionId::new(format!("{id}/session_{n}"))?;
        let mut events = Vec::new();
        for (i, t) in list.iter().enumerate() {
            let mut text = format!(
                "{}: {}",
                t["speaker"].as_str().unwrap_or("?"),
                t["text"].as_str().unwrap_or("")
            );
            if let Some(caption) = t.get("blip_caption").and_then(Value::as_str) {
                text.push_str(&format!(" [shares a photo: {caption}]"));
            }
            texts.push((session.clone(), i as Seq + 1, text.clone()));
            events.push(NewEvent::new(
                ts,
                EventBody::User {
                    content: MessageContent::Text(text),
                    name: None,
                },
            ));
            let dia = t["dia_id"].as_str().context("dia_id")?.to_owned();
            turns.insert(dia, (session.clone(), i as Seq + 1));
        }
        let new = NewSession {
            id: session,
            agent: agent.clone(),
            parent: None,
            created_ms: ts,
        };
        store.create_session(&new, &events)?;
        n += 1;
    }
    let mut questions = Vec::new();
    for q in conv["qa"].as_array().context("qa")? {
        let cat = q["category"].as_u64().unwrap_or(0);
        if !(1..=4).contains(&cat) {
            continue;
        }
        // Each evidence turn once, however often the question lists it.
        let evidence: Vec<String> = q["evidence"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .flat_map(|e| e.split(';').map(|p| p.trim().to_owned()))
            .filter(|e| !e.is_empty())
            .collect::<std::collections::BTreeSet<String>>()
            .into_iter()
            .collect();
        if evidence.is_empty() {
            continue;
        }
        let question = q["question"].as_str().context("question")?.to_owned();
        questions.push((cat, evidence, question));
    }
    Ok(Conversation {
        agent,
        turns,
        questions,
        texts,
    })
}

fn main() -> anyhow::Result<()> {
    let mut budgets = Vec::new();
    let mut data = PathBuf::from(DATA);
    let mut embedder = String::from("none");
    let mut db: Option<PathBuf> = None;
    let mut baseline = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--budget" => budgets.push(args.next().context("--budget N")?.parse()?),
            "--data" => data = args.next().context("--data FILE")?.into(),
            "--embedder" => embedder = args.next().context("--embedder SPEC")?,
            "--db" => db = Some(args.next().context("--db FILE")?.into()),
            "--baseline" => baseline = true,
            other => bail!("unknown argument `{other}`"),
        }
    }
    if budgets.is_empty() {
        budgets = BUDGETS.to_vec();
    }
    let raw = std::fs::read_to_string(&data).with_context(|| format!("{}", data.display()))?;
    let convs: Vec<Value> = serde_json::from_str(&raw)?;

    let store = MemoryStore::new();
    // With `--db`, memory is kept in that file: a second run finds the items (and their
    // vectors) already there and only embeds the questions.
    let memory = match &db {
        Some(path) => SqliteMemory::open(path)?,
        None => SqliteMemory::open_in_memory()?,
    };
    let model = embedder_from_spec(&embedder)?;
    let memory = match &model {
        Some(e) => memory.with_embedder(e.clone()),
        None => memory,
    };
    let started = Instant::now();
    let mut loaded = Vec::new();
    let mut baselines = Vec::new();
    let mut items = 0;
    for conv in &convs {
        let c = load(&store, conv)?;
        if baseline {
            baselines.push(Baseline::new(&c.texts, &memory, model.as_deref())?);
            items += c.texts.len();
        } else {
            for s in store.sessions()? {
                if s.agent == c.agent {
                    items += index(&store, &memory, &s.id)?.derived;
                }
            }
        }
        loaded.push(c);
    }
    let index_s = started.elapsed().as_secs_f64();

    let mut recall = Recall::default();
    let mut searches = 0;
    // budget → (tokens returned, hits returned)
    let mut spent: BTreeMap<u64, (u64, usize)> = BTreeMap::new();
    let started = Instant::now();
    for (k, c) in loaded.iter().enumerate() {
        for (cat, evidence, question) in &c.questions {
            let ranked = match baselines.get(k) {
                Some(b) => Some(b.rank(question, model.as_deref())?),
                None => None,
            };
            for &budget in &budgets {
                let hits = match (&ranked, baselines.get(k)) {
                    (Some(ranked), Some(b)) => b.pack(ranked, budget),
                    _ => memory.search(&Search {
                        filters: Filters {
                            agent: Some(c.agent.clone()),
                            ..Filters::default()
                        },
                        ..Search::new(question.clone(), budget)
                    })?,
                };
                searches += 1;
                let used: u64 = hits.iter().map(|h| h.tokens).sum();
                if used > budget {
                    bail!("hits hold {used} tokens, over the budget of {budget}");
                }
                let spent = spent.entry(budget).or_insert((0u64, 0usize));
                spent.0 += used;
                spent.1 += hits.len();
                let found = evidence
                    .iter()
                    .filter(|e| {
                        c.turns.get(*e).is_some_and(|(s, seq)| {
                            hits.iter().any(|h| {
                                h.sources.iter().any(|src| {
                                    src.session == *s
                                        && src.seq <= *seq
                                        && src.to_seq.unwrap_or(src.seq) >= *seq
                                })
                            })
                        })
                    })
                    .count();
                recall.add(budget, *cat, found, evidence.len());
            }
        }
    }
    let search_s = started.elapsed().as_secs_f64();

    let mut out = String::new();
    if baseline {
        out.push_str("baseline: BM25 over raw turns, + similarity, reciprocal rank, neighbours\n");
    }
    out.push_str(&format!(
        "embedder: {embedder}\n{} conversations, {items} items indexed in {index_s:.2} s \
         ({:.0} items/s); {searches} searches in {search_s:.2} s\n\n",
        loaded.len(),
        items as f64 / index_s.max(1e-9),
    ));
    out.push_str(&recall.table(&budgets));
    out.push('\n');
    for (budget, (tokens, hits)) in &spent {
        let n = (searches / budgets.len()).max(1) as f64;
        out.push_str(&format!(
            "budget {budget}: {:.1} hits, {:.0} tokens per search\n",
            *hits as f64 / n,
            *tokens as f64 / n
        ));
    }
    std::io::Write::write_all(&mut std::io::stdout(), out.as_bytes())?;
    Ok(())
}

/// Evidence found, per budget and category.
#[derive(Default)]
struct Recall {
    /// (budget, category) → tally.
    cells: BTreeMap<(u64, u64), Tally>,
}

#[derive(Default, Clone, Copy)]
struct Tally {
    /// Evidence turns found and evidence turns asked for, over all questions.
    found: usize,
    evidence: usize,
    /// The sum over questions of the share found, and the questions.
    shares: f64,
    questions: usize,
}

impl Tally {
    fn plus(self, other: Tally) -> Tally {
        Tally {
            found: self.found + other.found,
            evidence: self.evidence + other.evidence,
            shares: self.shares + other.shares,
            questions: self.questions + other.questions,
        }
    }

    fn pooled(&self) -> f64 {
        self.found as f64 / self.evidence.max(1) as f64
    }

    fn per_question(&self) -> f64 {
        self.shares / self.questions.max(1) as f64
    }
}

impl Recall {
    fn add(&mut self, budget: u64, category: u64, found: usize, evidence: usize) {
        let t = self.cells.entry((budget, category)).or_default();
        t.found += found;
        t.evidence += evidence;
        t.shares += found as f64 / evidence.max(1) as f64;
        t.questions += 1;
    }

    /// A table per budget: pooled and per-question recall over all questions, then pooled per
    /// category (with its evidence turns).
    fn table(&self, budgets: &[u64]) -> String {
        let mut out = String::from("| budget | pooled | per question |");
        for (_, name) in CATEGORIES {
            out.push_str(&format!(" {name} (pooled) |"));
        }
        out.push_str("\n|---|---|---|---|---|---|---|\n");
        for &budget in budgets {
            let mut all = Tally::default();
            let mut cells = String::new();
            for (cat, _) in CATEGORIES {
                let t = self.cells.get(&(budget, cat)).copied().unwrap_or_default();
                all = all.plus(t);
                cells.push_str(&format!(" {:.3} ({}) |", t.pooled(), t.evidence));
            }
            out.push_str(&format!(
                "| {budget} | {:.3} ({} turns) | {:.3} ({} questions) |{cells}\n",
                all.pooled(),
                all.evidence,
                all.per_question(),
                all.questions
            ));
        }
        out
    }
}

/// The simple hybrid over one conversation's raw turns (see the module's documentation).
struct Baseline {
    turns: Vec<(SessionId, Seq, String)>,
    tokens: Vec<u64>,
    /// Each turn's words with their counts, and its length in words.
    bags: Vec<(HashMap<String, u32>, usize)>,
    /// Turns holding each word.
    df: HashMap<String, usize>,
    avg: f64,
    vectors: Option<Vec<Vec<f32>>>,
}

/// Lowercased words (runs of letters and digits).
fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
}

impl Baseline {
    fn new(
        turns: &[(SessionId, Seq, String)],
        memory: &dyn Memory,
        model: Option<&dyn loom_memory::Embedder>,
    ) -> anyhow::Result<Self> {
        let mut df: HashMap<String, usize> = HashMap::new();
        let bags: Vec<(HashMap<String, u32>, usize)> = turns
            .iter()
            .map(|(_, _, text)| {
                let mut bag: HashMap<String, u32> = HashMap::new();
                let mut len = 0;
                for w in words(text) {
                    *bag.entry(w).or_default() += 1;
                    len += 1;
                }
                for w in bag.keys() {
                    *df.entry(w.clone()).or_default() += 1;
                }
                (bag, len)
            })
            .collect();
        let avg = bags.iter().map(|b| b.1).sum::<usize>() as f64 / bags.len().max(1) as f64;
        let vectors = match model {
            Some(m) => {
                let texts: Vec<&str> = turns.iter().map(|t| t.2.as_str()).collect();
                let mut all = Vec::with_capacity(texts.len());
                for chunk in texts.chunks(256) {
                    all.extend(m.embed(chunk)?);
                }
                Some(all)
            }
            None => None,
        };
        Ok(Self {
            tokens: turns.iter().map(|t| memory.count_tokens(&t.2)).collect(),
            turns: turns.to_vec(),
            bags,
            df,
            avg,
            vectors,
        })
    }

    /// The turns for `question`, best first: BM25 and (with a model) similarity fused by
    /// reciprocal rank over each list's first 100.
    fn rank(
        &self,
        question: &str,
        model: Option<&dyn loom_memory::Embedder>,
    ) -> anyhow::Result<Vec<usize>> {
        const K1: f64 = 1.2;
        const B: f64 = 0.75;
        const DEPTH: usize = 100;
        let n = self.turns.len() as f64;
        let mut q: Vec<String> = words(question).collect();
        q.sort();
        q.dedup();
        let mut bm25: Vec<(usize, f64)> = self
            .bags
            .iter()
            .enumerate()
            .map(|(i, (bag, len))| {
                let s = q
                    .iter()
                    .filter_map(|w| {
                        let tf = f64::from(*bag.get(w)?);
                        let df = self.df.get(w).copied().unwrap_or(0) as f64;
                        let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
                        Some(
                            idf * tf * (K1 + 1.0)
                                / (tf + K1 * (1.0 - B + B * *len as f64 / self.avg)),
                        )
                    })
                    .sum();
                (i, s)
            })
            .filter(|&(_, s)| s > 0.0)
            .collect();
        bm25.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let mut fused: HashMap<usize, f64> = HashMap::new();
        for (rank, (i, _)) in bm25.iter().take(DEPTH).enumerate() {
            *fused.entry(*i).or_default() += 1.0 / (60.0 + rank as f64 + 1.0);
        }
        if let (Some(m), Some(vectors)) = (model, &self.vectors) {
            let v = m.embed(&[question])?.remove(0);
            let mut near: Vec<(usize, f32)> = vectors
                .iter()
                .enumerate()
                .map(|(i, t)| (i, t.iter().zip(&v).map(|(a, b)| a * b).sum()))
                .collect();
            near.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            for (rank, (i, _)) in near.iter().take(DEPTH).enumerate() {
                *fused.entry(*i).or_default() += 1.0 / (60.0 + rank as f64 + 1.0);
            }
        }
        let mut ranked: Vec<(usize, f64)> = fused.into_iter().collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        Ok(ranked.into_iter().map(|(i, _)| i).collect())
    }

    /// The ranked turns, each followed by its neighbours in its session, packed under
    /// `budget`, as hits naming their turn.
    fn pack(&self, ranked: &[usize], budget: u64) -> Vec<loom_memory::Hit> {
        let mut taken = std::collections::BTreeSet::new();
        let mut left = budget;
        let mut hits = Vec::new();
        for &i in ranked {
            let same = |j: usize| self.turns.get(j).is_some_and(|t| t.0 == self.turns[i].0);
            let around = [Some(i), i.checked_sub(1), Some(i + 1)];
            for j in around.into_iter().flatten().filter(|&j| same(j)) {
                if taken.contains(&j) || self.tokens[j] > left {
                    continue;
                }
                taken.insert(j);
                left -= self.tokens[j];
                let (session, seq, text) = &self.turns[j];
                hits.push(loom_memory::Hit {
                    id: j as i64,
                    text: text.clone(),
                    tokens: self.tokens[j],
                    score: 0.0,
                    tier: loom_memory::Tier::L4,
                    sources: vec![loom_memory::Source {
                        session: session.clone(),
                        seq: *seq,
                        to_seq: None,
                    }],
                });
            }
            if left == 0 {
                break;
            }
        }
        hits
    }
}
