//! Ranking, filters and the token budget.

use loom_memory::{ItemKind, Memory, MemoryError, NewItem, Search, Tier};

use super::support::{agent, conformance, memory, session, turn};

fn best_first_with_stemming_and_stop_words_ignored(m: &dyn Memory) {
    m.write(&[
        turn("a", "s1", 1, "We went hiking in the mountains last weekend"),
        turn("a", "s2", 1, "The weather was nice and the food was good"),
        turn(
            "a",
            "s3",
            1,
            "Mountain hikes are my favourite thing, I hike every month",
        ),
    ])
    .unwrap();
    let hits = m
        .search(&Search::new("Where did they hike?", 1000))
        .unwrap();
    let at: Vec<&str> = hits.iter().map(|h| h.sources[0].session.as_str()).collect();
    // Stemmed `hike` matches hikes/hiking; stop words match nothing.
    assert_eq!(at, ["s3", "s1"], "{hits:?}");
    assert!(hits[0].score >= hits[1].score && hits[1].score > 0.0);
}

fn hits_fit_the_budget_and_an_item_that_does_not_fit_is_skipped_not_cut(m: &dyn Memory) {
    let long = format!("deadline {}", "word ".repeat(300));
    m.write(&[
        turn("a", "s", 1, &long),
        turn("a", "s", 2, "the deadline is friday"),
        turn(
            "a",
            "s",
            3,
            "deadline moved, ask the team about the deadline",
        ),
    ])
    .unwrap();
    for budget in [1, 5, 8, 20, 50, 400, 10_000] {
        let hits = m.search(&Search::new("deadline", budget)).unwrap();
        let sum: u64 = hits.iter().map(|h| h.tokens).sum();
        assert!(sum <= budget, "budget {budget}: {sum}");
        for h in &hits {
            assert!(h.text == long || h.tokens < 50, "never cut: {h:?}");
        }
        if budget >= 20 {
            assert!(
                hits.iter().any(|h| h.sources[0].seq == 2),
                "budget {budget}: {hits:?}"
            );
        }
        if budget == 10_000 {
            assert_eq!(hits.len(), 3);
        }
    }
    let mut s = Search::new("deadline", 10_000);
    s.limit = 1;
    assert_eq!(m.search(&s).unwrap().len(), 1);
}

fn filters_by_agent_session_tier_and_time(m: &dyn Memory) {
    let summary = NewItem {
        tier: Tier::L3,
        kind: ItemKind::Summary,
        ..turn("a", "s2", 4, "summary: the release checklist was reviewed")
    };
    m.write(&[
        turn("a", "s1", 1, "release checklist drafted"),
        turn("b", "s9", 2, "release checklist of agent b"),
        turn("a", "s2", 3, "release checklist signed off"),
        summary,
    ])
    .unwrap();
    let texts = |s: Search| -> Vec<String> {
        let mut t: Vec<String> = m.search(&s).unwrap().into_iter().map(|h| h.text).collect();
        t.sort();
        t
    };
    let mut s = Search::new("release checklist", 1000);
    s.filters.agent = Some(agent("b"));
    assert_eq!(texts(s.clone()), ["release checklist of agent b"]);
    s.filters.agent = Some(agent("a"));
    assert_eq!(texts(s.clone()).len(), 3);
    s.filters.session = Some(session("s2"));
    assert_eq!(
        texts(s.clone()),
        [
            "release checklist signed off",
            "summary: the release checklist was reviewed"
        ]
    );
    s.filters.tier = Some(Tier::L3);
    assert_eq!(
        texts(s.clone()),
        ["summary: the release checklist was reviewed"]
    );
    s.filters.tier = Some(Tier::L4);
    s.filters.session = None;
    s.filters.from_ms = Some(2000);
    s.filters.to_ms = Some(3000);
    assert_eq!(texts(s.clone()), ["release checklist signed off"]);
    s.filters.from_ms = Some(3001);
    let err = m.search(&s).unwrap_err();
    assert!(
        matches!(
            err,
            MemoryError::InvalidInput {
                field: "from/to",
                ..
            }
        ),
        "{err}"
    );
}

fn queries_without_words_or_with_syntax_find_nothing_or_match_literally(m: &dyn Memory) {
    m.write(&[turn("a", "s", 1, "NEAR the \"quoted\" OR thing AND stuff")])
        .unwrap();
    assert!(m.search(&Search::new("?!", 1000)).unwrap().is_empty());
    assert!(m.search(&Search::new("", 1000)).unwrap().is_empty());
    for q in [
        "\"quoted\"",
        "NEAR(",
        "thing*",
        "OR AND NOT",
        "col:thing",
        "^stuff",
    ] {
        m.search(&Search::new(q, 1000)).unwrap();
    }
    assert_eq!(
        m.search(&Search::new("\"quoted\" )(", 1000)).unwrap().len(),
        1
    );
    assert!(m.search(&Search::new("quoted", 0)).unwrap().is_empty());
}

#[test]
fn tiers_parse_in_either_case_and_refuse_others() {
    assert_eq!("l3".parse::<Tier>().unwrap(), Tier::L3);
    assert!("L5".parse::<Tier>().unwrap_err().is_bad_input());
}

fn the_turn_after_a_matching_question_is_found_by_its_neighbour(m: &dyn Memory) {
    m.write(&[
        turn("a", "s", 1, "Ann: what did you do on Sunday?"),
        turn(
            "a",
            "s",
            2,
            "Bob: went up the ridge with the kids, lovely view",
        ),
        turn("a", "s", 3, "Ann: the cat knocked over a plant"),
        turn("a", "s", 4, "Ann: the cat is fine though"),
        turn("a", "s2", 1, "Bob: quiet day"),
    ])
    .unwrap();
    let hits = m
        .search(&Search::new("What did they do on Sunday?", 1000))
        .unwrap();
    let at: Vec<(&str, u64)> = hits
        .iter()
        .map(|h| (h.sources[0].session.as_str(), h.sources[0].seq))
        .collect();
    assert!(at.contains(&("s", 2)), "{at:?}");
    // Only the items beside a match are lent a score.
    assert_eq!(at, [("s", 1), ("s", 2)]);
    let pos = |k| at.iter().position(|x| *x == k);
    assert!(pos(("s", 1)) < pos(("s", 2)), "{at:?}");
    // Nothing matched, nothing lent: an unrelated query finds nothing.
    assert!(m.search(&Search::new("zebra", 1000)).unwrap().is_empty());
}

fn a_term_that_matches_very_many_items_is_not_ranked_on_when_rarer_ones_exist(m: &dyn Memory) {
    // Each in its own session, so that no item is another's neighbour.
    let items: Vec<_> = (0..5_002)
        .map(|i| {
            turn(
                "a",
                &format!("s{i}"),
                1,
                &format!("weekly status report number {i}"),
            )
        })
        .chain([turn("a", "x", 1, "the zeppelin report")])
        .collect();
    m.write(&items).unwrap();
    let hits = m.search(&Search::new("zeppelin report", 10_000)).unwrap();
    let texts: Vec<&str> = hits.iter().map(|h| h.text.as_str()).collect();
    assert_eq!(texts, ["the zeppelin report"]);
    // Alone, a common term is still searched on, as far as the budget's limit.
    assert_eq!(
        m.search(&Search::new("report", 10_000)).unwrap().len(),
        loom_memory::limit_for(10_000)
    );
}

#[test]
fn frequent_terms_are_left_out_when_rarer_ones_supply_enough_matches() {
    let m = memory();
    // A term in more items than the ranking scores, and a rare one.
    let items: Vec<NewItem> = (1..=2_100u64)
        .map(|i| {
            turn(
                "a",
                &format!("s{}", i / 100),
                i % 100 + 1,
                &format!("common filler {i}"),
            )
        })
        .chain([turn("a", "rare", 1, "a rare comet and common dust")])
        .collect();
    m.write(&items).unwrap();
    let search = |q: &str| {
        m.search(&Search {
            limit: 5,
            ..Search::new(q, 1000)
        })
        .unwrap()
    };
    let hits = search("comet common");
    assert_eq!(hits[0].text, "a rare comet and common dust", "{hits:?}");
    // A query of the frequent term alone still answers, from its newest matches.
    let hits = search("common");
    assert_eq!(hits.len(), 5);
    assert!(
        hits.iter().all(|h| h.text == "a rare comet and common dust"
            || h.text
                .trim_start_matches("common filler ")
                .parse::<u64>()
                .unwrap()
                > 100),
        "{hits:?}"
    );
}

#[test]
fn a_version_1_sqlite_memory_is_indexed_under_its_terms_on_opening() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("loom.db");
    let id = {
        let m = loom_memory::SqliteMemory::open(&path).unwrap();
        m.write(&[
            turn("a", "s", 1, "We went hiking in the mountains"),
            turn("b", "s", 1, "Hiking, hiking and more hiking"),
        ])
        .unwrap()[0]
            .item()
    };
    // Back to what a build of version 1 left: FTS5 over the text, stemmed by FTS5, no counts.
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch(
            "DROP TABLE memory_fts; DROP TABLE memory_terms; DROP TABLE memory_stats;
             CREATE VIRTUAL TABLE memory_fts USING fts5 (
                 text, tokenize = 'porter unicode61 remove_diacritics 2');
             INSERT INTO memory_fts (rowid, text) SELECT id, text FROM memory_items;
             DELETE FROM memory_schema WHERE version > 1;",
        )
        .unwrap();
    }
    let m = loom_memory::SqliteMemory::open(&path).unwrap();
    let mut s = Search::new("Where did they hike?", 1000);
    s.filters.agent = Some(agent("a"));
    let hits = m.search(&s).unwrap();
    assert_eq!(hits.iter().map(|h| h.id).collect::<Vec<_>>(), [id]);
    let c = rusqlite::Connection::open(&path).unwrap();
    let df: i64 = c
        .query_row(
            "SELECT sum(df) FROM memory_terms WHERE term = 'hike'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(df, 2, "one item of each agent holds `hike`");
    assert_eq!(loom_memory::SqliteMemory::schema_version(), 2);
}

fn without_a_limit_the_budget_decides_how_much_comes_back(m: &dyn Memory) {
    // 300 turns of about 10 tokens that all match: far more than a budget of 2,000 holds.
    let items: Vec<_> = (0..300)
        .map(|i| {
            turn(
                "a",
                &format!("s{i}"),
                1,
                &format!("Ann: the garden party number {i} was lovely"),
            )
        })
        .collect();
    m.write(&items).unwrap();
    let largest = items.iter().map(|i| i.text.len() as u64).max().unwrap();
    for budget in [500, 1000, 2000] {
        let hits = m.search(&Search::new("garden party", budget)).unwrap();
        let sum: u64 = hits.iter().map(|h| h.tokens).sum();
        // Filled up to less than one item short of the budget, past the 50 hits a fixed limit
        // stopped at.
        assert!(
            sum <= budget && sum + largest > budget,
            "budget {budget}: {sum} tokens in {} hits",
            hits.len()
        );
        if budget == 2000 {
            assert!(hits.len() > 50, "{}", hits.len());
        }
    }
    // A limit the caller sets still holds.
    let mut s = Search::new("garden party", 2000);
    s.limit = 7;
    assert_eq!(m.search(&s).unwrap().len(), 7);
}

fn an_agents_ranking_does_not_move_with_what_other_agents_store(m: &dyn Memory) {
    let mine = [
        "the deploy key rotates every quarter",
        "the staging deploy waits for the nightly backup",
        "a quarter of the backup volume is reserved for logs",
        "the nightly job mails the on-call engineer",
    ];
    let items: Vec<_> = mine
        .iter()
        .enumerate()
        .map(|(i, t)| turn("ops", "s1", i as u64 + 1, t))
        .collect();
    m.write(&items).unwrap();
    let search = Search {
        filters: loom_memory::Filters {
            agent: Some(agent("ops")),
            ..Default::default()
        },
        ..Search::new("nightly deploy quarter", 1000)
    };
    let ranked = || -> Vec<(String, f64)> {
        m.search(&search)
            .unwrap()
            .into_iter()
            .map(|h| (h.text, h.score))
            .collect()
    };
    let before = ranked();
    assert!(before.len() >= 3, "{before:?}");
    // Another agent (another tenant's, say) makes "deploy" common and "nightly" rare in its
    // own memory, and makes its items longer: under shared statistics the weights of this
    // agent's terms and its average length would move.
    let theirs: Vec<_> = (0..40)
        .map(|i| {
            turn(
                "web",
                "s9",
                i + 1,
                &format!("deploy number {i} of the web tier, rolled out to every region at once"),
            )
        })
        .chain([turn("web", "s9", 99, "a quarter deploy")])
        .collect();
    m.write(&theirs).unwrap();
    assert_eq!(ranked(), before);
    // And forgetting them changes nothing either.
    m.forget_session(&agent("web"), &session("s9")).unwrap();
    assert_eq!(ranked(), before);
}

conformance!(
    an_agents_ranking_does_not_move_with_what_other_agents_store,
    best_first_with_stemming_and_stop_words_ignored,
    without_a_limit_the_budget_decides_how_much_comes_back,
    hits_fit_the_budget_and_an_item_that_does_not_fit_is_skipped_not_cut,
    filters_by_agent_session_tier_and_time,
    queries_without_words_or_with_syntax_find_nothing_or_match_literally,
    the_turn_after_a_matching_question_is_found_by_its_neighbour,
    a_term_that_matches_very_many_items_is_not_ranked_on_when_rarer_ones_exist,
);
