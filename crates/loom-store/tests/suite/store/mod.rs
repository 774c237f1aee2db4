//! The store conformance suite: every scenario in `scenarios/` runs against every backend.
//!
//! [`with_store_scenarios!`] holds the one list of scenarios and hands it to
//! [`store_backend!`], which writes one `#[test]` per scenario for a backend. A backend is added
//! with one more `with_store_scenarios!(store_backend!(...))` line, and
//! `no_backend_skips_a_scenario` fails if a backend's tests and the scenario functions defined in
//! `scenarios/` ever differ.

mod scenarios;

use std::collections::BTreeSet;

use crate::suite::support::{MemoryHarness, PgHarness, SqliteHarness, StoreHarness};

/// Calls `$callback!($args; <every scenario as group::name>)`.
macro_rules! with_store_scenarios {
    ($callback:ident ! ( $($args:tt)* )) => {
        $callback! { $($args)* ;
            log::create_append_read,
            log::seqs_are_one_based_and_contiguous,
            log::unknown_session_is_an_error,
            log::existing_session_is_not_recreated,
            log::bad_batch_changes_nothing,
            log::bad_create_creates_nothing,
            log::create_sessions_in_one_call,
            log::tool_call_states,
            log::resolve_only_if_pending,
            log::every_event_kind_round_trips,
            log::threads_share_one_store,
            records::summaries_are_checked_and_versioned,
            records::model_calls_are_numbered,
            records::usage_is_reported_and_read_back,
            records::usage_retry_is_idempotent,
            records::conflicting_usage_is_refused,
            records::usage_for_an_unknown_call_is_refused,
            records::cached_over_input_is_refused,
            records::a_reply_and_its_usage_are_written_together,
            records::steps_are_keyed_and_checked,
            records::aliases_point_at_one_blob,
            records::sessions_are_listed_with_counts,
            records::a_deleted_session_leaves_nothing_and_others_untouched,
            records::everything_survives_reopen,
            turns::a_turn_writes_its_events_steps_aliases_and_receipt,
            turns::a_turn_against_a_moved_log_writes_nothing,
            turns::a_bad_turn_changes_nothing,
            turns::catching_up_returns_only_what_changed,
            keys::keys_are_created_listed_and_found,
            keys::revoked_keys_are_still_found,
            keys::unknown_key_is_not_revoked,
            keys::duplicate_keys_change_nothing,
            keys::malformed_keys_are_refused,
            keys::keys_survive_reopen,
        }
    };
}

/// One module of tests for one backend: a `#[test]` per scenario, and the list it covers.
macro_rules! store_backend {
    ($backend:ident, $harness:ty ; $($group:ident :: $scenario:ident),* $(,)?) => {
        mod $backend {
            use super::*;

            $(
                #[test]
                fn $scenario() {
                    let Some(mut harness) = <$harness as StoreHarness>::try_open() else {
                        return;
                    };
                    scenarios::$group::$scenario(&mut harness);
                }
            )*

            pub(super) const COVERED: &[&str] = &[$(stringify!($scenario)),*];
        }
    };
}

with_store_scenarios!(store_backend!(memory, MemoryHarness));
with_store_scenarios!(store_backend!(sqlite, SqliteHarness));
with_store_scenarios!(store_backend!(postgres, PgHarness));

/// The names of the scenario functions a source file defines.
fn defined_scenarios(source: &str) -> BTreeSet<String> {
    source
        .lines()
        .filter_map(|line| line.trim_start().strip_prefix("pub(crate) fn "))
        .filter_map(|rest| rest.split(['<', '(']).next())
        .map(str::to_owned)
        .collect()
}

#[test]
fn no_backend_skips_a_scenario() {
    let defined: BTreeSet<String> = [
        include_str!("scenarios/log.rs"),
        include_str!("scenarios/records.rs"),
        include_str!("scenarios/keys.rs"),
        include_str!("scenarios/turns.rs"),
    ]
    .into_iter()
    .flat_map(defined_scenarios)
    .collect();
    assert!(
        defined.len() >= 16,
        "scenario parsing found only {defined:?}"
    );
    for (backend, list) in [
        ("memory", memory::COVERED),
        ("sqlite", sqlite::COVERED),
        ("postgres", postgres::COVERED),
    ] {
        let covered: BTreeSet<String> = list.iter().map(|s| (*s).to_owned()).collect();
        assert_eq!(
            covered.len(),
            list.len(),
            "{backend} lists a scenario twice"
        );
        let missing: Vec<_> = defined.difference(&covered).collect();
        assert!(missing.is_empty(), "{backend} skips {missing:?}");
        let unknown: Vec<_> = covered.difference(&defined).collect();
        assert!(
            unknown.is_empty(),
            "{backend} runs unknown scenarios {unknown:?}"
        );
    }
}
