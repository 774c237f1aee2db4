//! Scenarios: writing (dedup, supersession, forget), search (ranking, filters, budget),
//! embedders and hybrid search, and indexing from a stored log.

mod embed;
mod extract;
mod index;
mod kb;
mod local_model;
mod postgres;
mod search;
mod support;
mod tiers;
mod write;

/// Every scenario (a function taking the memory, `m: &dyn Memory`, or a database, `db: &Db`) is
/// listed in its file's `conformance!`, which runs it against both backends from one list: a
/// scenario written but not listed would run against neither.
#[test]
fn no_memory_backend_skips_a_scenario() {
    use std::collections::BTreeSet;
    let files = [
        ("embed", include_str!("embed.rs")),
        ("extract", include_str!("extract.rs")),
        ("index", include_str!("index.rs")),
        ("kb", include_str!("kb.rs")),
        ("local_model", include_str!("local_model.rs")),
        ("search", include_str!("search.rs")),
        ("tiers", include_str!("tiers.rs")),
        ("write", include_str!("write.rs")),
    ];
    let mut scenarios = 0;
    for (file, text) in files {
        let defined: BTreeSet<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("fn "))
            .filter_map(|rest| {
                let (name, args) = rest.split_once('(')?;
                (args.starts_with("m: &dyn Memory)") || args.starts_with("db: &Db)"))
                    .then_some(name)
            })
            .collect();
        let mut listed = BTreeSet::new();
        for block in text.split("conformance!(").skip(1) {
            let body = block.split(");").next().unwrap_or_default();
            let body = body.trim_start().strip_prefix("db:").unwrap_or(body);
            listed.extend(body.split(',').map(str::trim).filter(|n| !n.is_empty()));
        }
        let missing: Vec<_> = defined.difference(&listed).collect();
        assert!(
            missing.is_empty(),
            "{file}.rs: {missing:?} run on no backend"
        );
        let unknown: Vec<_> = listed.difference(&defined).collect();
        assert!(
            unknown.is_empty(),
            "{file}.rs lists unknown scenarios {unknown:?}"
        );
        scenarios += defined.len();
    }
    assert!(scenarios >= 40, "scenario parsing found only {scenarios}");
}
