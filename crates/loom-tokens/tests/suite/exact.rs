//! Exactness: every text piece of every trajectory in ../shared/traces counts exactly as Python
//! tiktoken counted it (fixture written by scripts/tiktoken_fixture.py), for both encodings.

use std::collections::BTreeMap;

use loom_tokens::{ContentClass, Encoding, Estimator};
use serde_json::Value;

use super::traces;

const FIXTURE: &str = include_str!("../fixtures/tiktoken_counts.json");

fn fixture() -> anyhow::Result<Value> {
    Ok(serde_json::from_str(FIXTURE)?)
}

#[test]
fn exact_counts_match_python_tiktoken() -> anyhow::Result<()> {
    let Some(files) = traces::load(&traces::traces_dir())? else {
        eprintln!("SKIPPED: ../shared/traces is absent; the exactness test needs it (CI has it)");
        return Ok(());
    };
    let fixture = fixture()?;
    let mut checked = BTreeMap::new();
    let mut mismatches = Vec::new();
    for file in &files {
        let Some(expected) = fixture["files"].get(&file.name) else {
            anyhow::bail!(
                "{} is not in the fixture: run scripts/tiktoken_fixture.py fixture",
                file.name
            );
        };
        anyhow::ensure!(
            expected["sha256"].as_str() == Some(file.sha256.as_str()),
            "{} changed since the fixture was written: run scripts/tiktoken_fixture.py fixture",
            file.name
        );
        let rows = expected["trajectories"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default();
        anyhow::ensure!(
            rows.len() == file.trajectories.len(),
            "{}: trajectory count differs",
            file.name
        );
        for (traj, row) in file.trajectories.iter().zip(rows) {
            let id = traj["id"].as_str().unwrap_or("?");
            anyhow::ensure!(
                row["id"].as_str() == Some(id),
                "{}: trajectory order differs at {id}",
                file.name
            );
            let mut labelled = Vec::new();
            for (i, m) in traj["messages"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or_default()
                .iter()
                .enumerate()
            {
                for (label, text) in traces::pieces(m) {
                    labelled.push((format!("messages[{i}].{label}"), text));
                }
            }
            for enc in Encoding::ALL {
                let want: Vec<u64> = serde_json::from_value(row[enc.name()].clone())?;
                anyhow::ensure!(want.len() == labelled.len(), "{id}: piece count differs");
                for ((label, text), want) in labelled.iter().zip(want) {
                    let got = enc.count(text) as u64;
                    *checked.entry(enc.name()).or_insert(0u64) += 1;
                    if got != want {
                        mismatches.push(format!(
                            "{} {id} {label}: tiktoken {want}, loom {got}",
                            enc.name()
                        ));
                    }
                }
            }
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} mismatches, first: {:#?}",
        mismatches.len(),
        &mismatches[..mismatches.len().min(10)]
    );
    for enc in Encoding::ALL {
        assert!(
            checked.get(enc.name()).copied().unwrap_or(0) > 10_000,
            "too few pieces checked: {checked:?}"
        );
    }
    Ok(())
}

#[test]
fn fixture_totals_are_consistent() -> anyhow::Result<()> {
    // The totals line is what docs/performance.md quotes; it must be the sum of the lists.
    let fixture = fixture()?;
    for enc in Encoding::ALL {
        let mut sum = 0u64;
        for file in fixture["files"]
            .as_object()
            .into_iter()
            .flat_map(|m| m.values())
        {
            for row in file["trajectories"].as_array().into_iter().flatten() {
                sum += row[enc.name()]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_u64)
                    .sum::<u64>();
            }
        }
        assert_eq!(
            fixture["totals"][enc.name()].as_u64(),
            Some(sum),
            "{}",
            enc.name()
        );
    }
    Ok(())
}

#[test]
fn default_margin_covers_95_percent_of_trace_messages() -> anyhow::Result<()> {
    // The initial calibration was measured against o200k_base on these traces; its margin must
    // still cover at least 95% of the pieces of 50 tokens or more.
    let Some(files) = traces::load(&traces::traces_dir())? else {
        eprintln!("SKIPPED: ../shared/traces is absent");
        return Ok(());
    };
    let est = Estimator::default();
    let (mut covered, mut total) = (0usize, 0usize);
    let mut by_class = [0usize; 4];
    for text in traces::all_pieces(&files) {
        let actual = Encoding::O200kBase.count(text) as u64;
        if actual < 50 {
            continue;
        }
        let e = est.estimate(text);
        total += 1;
        covered += usize::from(e.tokens() >= actual);
        for (i, c) in ContentClass::ALL.into_iter().enumerate() {
            by_class[i] += usize::from(e.units.get(c) > 0);
        }
    }
    assert!(total > 1000, "{total}");
    let share = covered as f64 / total as f64;
    assert!(
        share >= 0.95,
        "margin covers {share:.3} of {total} pieces (by class {by_class:?})"
    );
    Ok(())
}
