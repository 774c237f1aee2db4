//! Observations of real tool results from `../shared/traces` (one trajectory, one result each,
//! asserted word for word), and the bad inputs every reducer must survive.

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock, PoisonError};

use serde_json::Value;

use super::*;
use crate::step::ToolKind;

const TRACES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/traces");

type Trajectories = BTreeMap<String, &'static [Value]>;

/// Every trajectory of a trace file, parsed once per test run.
fn trajectories(file: &str) -> &'static [Value] {
    static CACHE: OnceLock<Mutex<Trajectories>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(BTreeMap::new()));
    let mut cache = cache.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(t) = cache.get(file) {
        return t;
    }
    let path = format!("{TRACES}/{file}.jsonl");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    let parsed: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let leaked: &'static [Value] = Box::leak(parsed.into_boxed_slice());
    cache.insert(file.to_owned(), leaked);
    leaked
}

/// The `n`th tool result (1-based) of the trajectory whose id ends with `traj`, and its call.
fn real(file: &str, traj: &str, n: usize) -> (ToolCall, String) {
    let t = trajectories(file)
        .iter()
        .find(|t| t["id"].as_str().is_some_and(|id| id.ends_with(traj)))
        .unwrap_or_else(|| panic!("no trajectory {traj} in {file}"));
    let mut calls = BTreeMap::new();
    let mut seen = 0;
    for m in t["messages"].as_array().unwrap() {
        for tc in m["tool_calls"].as_array().into_iter().flatten() {
            let call = ToolCall {
                id: tc["id"].as_str().unwrap().to_owned(),
                name: tc["function"]["name"].as_str().unwrap().to_owned(),
                arguments: tc["function"]["arguments"].as_str().unwrap().to_owned(),
            };
            calls.insert(call.id.clone(), call);
        }
        if m["role"] == "tool" {
            seen += 1;
            if seen == n {
                let call = calls[m["tool_call_id"].as_str().unwrap()].clone();
                return (call, m["content"].as_str().unwrap().to_owned());
            }
        }
    }
    panic!("{traj} has fewer than {n} tool results")
}

fn reduce_one(
    call: Option<&ToolCall>,
    tool: &str,
    content: &[u8],
    is_error: bool,
    n: u32,
) -> Reduction {
    let stats = ContentStats::of(content);
    let input = ResultInput {
        call,
        call_id: call.map_or("orphan", |c| c.id.as_str()),
        tool_name: tool,
        content,
        is_error,
        stats: &stats,
    };
    let ctx = StepContext {
        number: n,
        call_seq: 1,
        result_seq: 2,
        timestamp_ms: 1_700_000_000_000,
    };
    ReduceConfig::default().reduce(&input, &ctx)
}

/// Reduces a real result as step `n` and checks success, offload alias and observation.
fn check(
    file: &str,
    traj: &str,
    n: usize,
    success: bool,
    offload: Option<&str>,
    observation: &str,
) -> Step {
    let (call, content) = real(file, traj, n);
    let number = u32::try_from(n).unwrap();
    let r = reduce_one(Some(&call), &call.name, content.as_bytes(), false, number);
    assert_eq!(r.step.observation, observation, "{file} {traj} #{n}");
    assert_eq!(r.step.success, success, "{file} {traj} #{n}: success");
    assert_eq!(r.offload.as_deref(), offload, "{file} {traj} #{n}: offload");
    assert!(
        r.step.observation.chars().count() <= 200,
        "too long: {}",
        r.step.observation
    );
    assert!(!r.step.observation.contains('\n'));
    // Stats are always those of the original output, never of what the observation shows.
    assert_eq!(r.step.stats, ContentStats::of(content.as_bytes()));
    r.step
}

const MINI: &str = "miniswe_gemini3pro_swebv";
const SWE: &str = "sweagent_traj";
const TAU: &str = "tau_bench_airline_gpt4o";
const WEB: &str = "browsergym_workarena_gpt4o";
const REACT: &str = "fireact_hotpotqa__gpt35ft_run";

#[test]
fn shell_reads_a_file_range_with_nl_and_sed() {
    let step = check(
        MINI,
        "astropy__astropy-13977",
        4,
        true,
        Some("outputs/file_004.txt"),
        "Read astropy/units/quantity.py lines 600-650 (2.4 KB, 51 lines, Python); defines __array_wrap__, __array_ufunc__; uses obj.__dict__, self._set_unit, self.info, obj.info, self._new_view, github.com",
    );
    assert_eq!(step.kind, ToolKind::ReadFile);
    assert_eq!(step.minimal_args["path"], "astropy/units/quantity.py");
    assert_eq!(
        step.minimal_args["command"],
        "nl -ba astropy/units/quantity.py | sed -n '600,650p'"
    );
    assert_eq!(step.facts["exit_code"], 0);
}

#[test]
fn shell_lists_a_directory() {
    let step = check(MINI, "astropy__astropy-13977", 1, true, Some("outputs/list_001.txt"),
        "Listed .: 33 entries (23 files, 10 dirs): .astropy-root, .circleci, .git, .git-blame-ignore-revs, .gitattributes, .github, .gitignore, .mailmap, .pep8speaks.yml, .pre-commit-config.yaml, .pyinstaller");
    assert_eq!((step.kind, step.results), (ToolKind::ListDir, Some(33)));
}

#[test]
fn shell_heredoc_is_a_write_that_never_keeps_the_content() {
    let step = check(
        MINI,
        "astropy__astropy-13977",
        2,
        true,
        None,
        "Wrote reproduce_issue.py (30 lines, 897 B)",
    );
    assert_eq!(step.kind, ToolKind::WriteFile);
    assert_eq!(step.facts["bytes_written"], 897);
    assert_eq!(
        step.minimal_args["command"],
        "cat <<'EOF' > reproduce_issue.py …"
    );
    check(
        MINI,
        "django__django-11138",
        20,
        true,
        None,
        "Edited django/db/backends/sqlite3/base.py (sed -i)",
    );
}

#[test]
fn shell_run_keeps_exit_code_and_the_line_that_matters() {
    check(
        MINI,
        "astropy__astropy-13977",
        3,
        true,
        None,
        "`python3 reproduce_issue.py` exit 0, 3 lines: Attempting: (1 * u.m) + DuckArray(1 * u.mm)",
    );
    check(MINI, "astropy__astropy-13977", 17, true, Some("outputs/shell_017.log"),
        "`pytest astropy/units/tests/test_quantity_ufuncs.py` exit 0, 50 lines: 201 passed, 4 skipped in 0.59s");
    check(MINI, "django__django-11138", 70, true, Some("outputs/shell_070.log"),
        "`/testbed/tests/runtests.py backends.sqlite` exit 0, 25 lines: Ran 24 tests: OK (skipped=2)");
    check(MINI, "astropy__astropy-13977", 27, true, Some("outputs/shell_027.log"),
        "`echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A && git diff --cached` 90 lines: diff of 3 files (+62 -2): astropy/units/quantity.py, astropy/units/tests/test_quantity_duck_typing.py, pyproj…");
}

#[test]
fn shell_failures_keep_the_error_tail() {
    let step = check(MINI, "django__django-11138", 15, false, Some("outputs/shell_015.log"),
        "`python3 reproduce_issue.py (after writing reproduce_issue.py)` exit 1, 27 lines: django.db.utils.OperationalError: no such table: __main__mymodel");
    assert_eq!(
        step.error.as_deref(),
        Some("exit 1: django.db.utils.OperationalError: no such table: __main__mymodel")
    );
    assert_eq!(step.facts["wrote"], "reproduce_issue.py");
    check(MINI, "astropy__astropy-13977", 21, false, Some("outputs/shell_021.log"),
        "`pytest astropy/units/tests/test_quantity_duck_typing.py` exit 1, 69 lines: 1 failed, 1 passed in 0.05s; FAILED astropy/units/tests/test_quantity_duck_typing.py::test_duck_array_radd - assert <Quanti…");
    check(MINI, "django__django-11138", 72, false, Some("outputs/shell_072.log"),
        "`/testbed/tests/runtests.py timezones` exit 1, 171 lines (2429 chars elided by the agent): Ran 83 tests: FAILED (failures=3, errors=3, skipped=8); ERROR: test_query_datetimes (timezones.tests.LegacyD…");
}

#[test]
fn shell_greps_keep_pattern_lines_and_matched_text() {
    let step = check(MINI, "astropy__astropy-13977", 5, true, None,
        "Searched 'arrays.append' in astropy/units/quantity.py: 1 match at line 670: arrays.append(converter(input_) if converter else input_)");
    assert_eq!((step.kind, step.results), (ToolKind::Grep, Some(1)));
    // grep exits 1 when nothing matches: a finding, not a failure.
    let step = check(
        MINI,
        "astropy__astropy-13977",
        7,
        true,
        None,
        "Searched 'def converters_and_unit' in astropy/units/quantity.py: no matches",
    );
    assert_eq!(
        (step.facts["exit_code"].as_i64(), step.results),
        (Some(1), Some(0))
    );
    check(MINI, "astropy__astropy-13977", 8, true, None,
        "Searched 'from .* import .*converters_and_unit' in astropy/units/quantity.py: 1 match: from .quantity_helper import can_have_arbitrary_unit, check_output, converters_and_unit");
    check(MINI, "astropy__astropy-13977", 10, true, None,
        "Searched '_condition_arg' in astropy/units/core.py: 4 matches at lines 1016, 1073, 2604, 2642");
}

#[test]
fn shell_find_lists_matching_paths() {
    let step = check(MINI, "astropy__astropy-13977", 16, true, None,
        "Found 8 paths matching 'test_quantity*.py' in astropy/units/tests: astropy/units/tests/test_quantity_helpers.py, astropy/units/tests/test_quantity_typing.py, +6 more");
    assert_eq!(step.results, Some(8));
}

#[test]
fn swe_agent_viewer_editor_and_search_tools() {
    let traj = "6e44b9__sweagenttestrepo-1c2844.traj";
    check(
        SWE,
        traj,
        1,
        true,
        None,
        "Found 1 path matching 'missing_colon.py': /SWE-agent__test-repo/tests/missing_colon.py",
    );
    let open = check(SWE, traj, 2, true, None, "Opened /SWE-agent__test-repo/tests/missing_colon.py (10 lines total, showing 1-10, Python); defines division");
    assert_eq!(open.kind, ToolKind::ReadFile);
    check(
        SWE,
        traj,
        3,
        true,
        None,
        "Edited /SWE-agent__test-repo/tests/missing_colon.py: Replaced 1 occurrences; now 10 lines",
    );
    check(
        SWE,
        traj,
        4,
        true,
        None,
        "`python3 /SWE-agent__test-repo/tests/missing_colon.py` 1 line: 8.2",
    );
    check(
        SWE,
        "BabyEncryption.traj",
        2,
        true,
        None,
        "Created decrypt.py; now 1 line",
    );
    check(SWE, "BabyEncryption.traj", 3, true, None,
        "Edited /__Users__talora__LLM_CTF_Dataset_Dev__HTB__crypto__BabyEncryption/decrypt.py lines 1-1, 6 new lines; now 6 lines");
    check(SWE, "BabyEncryption.traj", 8, false, Some("outputs/write_008.txt"),
        "Write to /__Users__talora__LLM_CTF_Dataset_Dev__HTB__crypto__BabyEncryption/chall.py failed: E999 IndentationError: unexpected indent");
}

#[test]
fn swe_agent_program_named_actions_and_crashes_without_exit_codes() {
    let step = check(
        SWE,
        "BabyEncryption.traj",
        4,
        false,
        Some("outputs/shell_004.log"),
        "`python decrypt.py` 6 lines: TypeError: integer argument expected, got float",
    );
    assert_eq!(step.kind, ToolKind::Shell);
    check(
        SWE,
        "katy.traj",
        15,
        true,
        None,
        "`submit 'flag{d|o9yx?_brnfj{}'` 1 line: Wrong flag!",
    );
    check(
        SWE,
        "katy.traj",
        17,
        false,
        None,
        "`python recover_flag.py` timed out",
    );
}

#[test]
fn unknown_tools_describe_json_shape_with_ids_first() {
    check(TAU, "task2-trial0", 2, true, None,
        "get_reservation_details(JG7FMM) → {reservation_id: JG7FMM, user_id: omar_davis_3817, flights: [HAT028, HAT277], passengers: [Omar, Fatima], payment_history: [credit_card_2929732], +8 more}");
    check(TAU, "task0-trial0", 1, true, None,
        "get_user_details(mia_li_3668) → {reservations: [NO6JO3, AIXC49, HKEG34], saved_passengers: [Amelia], dob: 1990-04-05, membership: gold, email: mia.li3818@example.com, +3 more}");
    check(TAU, "task10-trial0", 2, true, None,
        "list_all_airports() → {ATL: Atlanta, BOS: Boston, CLT: Charlotte, DEN: Denver, DFW: Dallas, DTW: Detroit, EWR: Newark, IAH: Houston, JFK: New York, LAS: Las Vegas, LAX: Los Angeles, +9 more}");
    let step = check(TAU, "task0-trial0", 2, true, None,
        "search_direct_flight(date=2024-05-20, destination=SEA, origin=JFK) → list of 2 (flight_number): HAT069, HAT083");
    assert_eq!(step.results, Some(2));
    check(TAU, "task0-trial0", 3, true, Some("outputs/search_onestop_flight_003.json"),
        "search_onestop_flight(date=2024-05-20, destination=SEA, origin=JFK) → list of 4 lists (flight_number): HAT057+HAT039, HAT136+HAT039, HAT218+HAT039, HAT268+HAT039");
}

#[test]
fn unknown_tools_short_text_errors_and_empty_results() {
    // A one-line answer shorter than any description of it is its own observation; the compact
    // line puts the call in front.
    let step = check(TAU, "task0-trial0", 4, true, None, "255.0");
    assert_eq!(step.facts["verbatim"], true);
    assert_eq!(
        Templates::default().compact(&step).summary,
        "calculate(expression=152 + 103) → 255.0"
    );
    let step = check(
        TAU,
        "task0-trial0",
        5,
        false,
        None,
        "Error: payment amount does not add up, total price is 305, but paid 255",
    );
    assert_eq!(
        step.error.as_deref(),
        Some("Error: payment amount does not add up, total price is 305, but paid 255")
    );
    check(
        TAU,
        "task0-trial0",
        6,
        true,
        None,
        "think(The total cost for the selected flights…) → no output",
    );
    check(
        REACT,
        "q6238",
        1,
        true,
        None,
        "Episode finished, reward = True",
    );
}

#[test]
fn browser_actions_keep_action_outcome_and_page() {
    let traj = "workarena.servicenow.order-ipad-pro_11";
    let (call, content) = real(WEB, traj, 6);
    assert_eq!(call.name, "focus");
    let r = reduce_one(Some(&call), &call.name, content.as_bytes(), false, 6);
    assert_eq!(r.step.observation,
        "focus('a365') → error: ValueError: Could not find element with bid \"a365\"; page 'Order Status: REQ0010007 | ServiceNow' (dev282647.service-now.com/now/nav/ui/classic/pa…), 9.4 KB");
    assert!(!r.step.success);
    assert_eq!(r.offload.as_deref(), Some("outputs/page_006.txt"));
    assert_eq!(r.step.kind, ToolKind::BrowserAction);
}

#[test]
fn browser_goto_is_a_navigation_and_always_offloaded() {
    let traj = "order-apple-watch_21 Apple.com";
    let (call, content) = real(WEB, traj, 2);
    assert_eq!(call.name, "goto");
    let r = reduce_one(Some(&call), &call.name, content.as_bytes(), false, 2);
    assert_eq!(r.step.kind, ToolKind::Navigate);
    assert_eq!(
        r.step.observation,
        "Visited www.apple.com (24.9 KB page): 'Apple'"
    );
    assert_eq!(r.offload.as_deref(), Some("outputs/page_002.txt"));
    assert_eq!(r.step.minimal_args["url"], "https://www.apple.com");
}

#[test]
fn react_search_keeps_query_and_answer() {
    check(REACT, "q457", 1, true, None,
        "Frigg is a goddess, one of the Æsir, in Germanic mythology. In Norse mythology, the source of most surviving information about her, she is associated with ...");
    check(REACT, "q4739", 1, true, None,
        "Searched 'Canadian rock band Vices and Virtues': Vices and Virtues is the second studio album by Canadian rock band Art of Dying. It is the band's major label debut after signing under David Draiman …");
    check(REACT, "q457", 2, false, None,
        "click(Frige - Wikipedia] Action: search[tales…) failed: ('click', 'Frige - Wikipedia') generated an exception: Unknown tool name: click");
}

#[test]
fn every_real_result_reduces_to_one_bounded_line() {
    for file in [
        MINI,
        SWE,
        TAU,
        WEB,
        REACT,
        "fireact_hotpotqa__gpt4_react_sft",
    ] {
        for t in trajectories(file) {
            let mut calls = BTreeMap::new();
            let mut n = 0;
            for m in t["messages"].as_array().unwrap() {
                for tc in m["tool_calls"].as_array().into_iter().flatten() {
                    calls.insert(
                        tc["id"].as_str().unwrap().to_owned(),
                        ToolCall {
                            id: tc["id"].as_str().unwrap().to_owned(),
                            name: tc["function"]["name"].as_str().unwrap().to_owned(),
                            arguments: tc["function"]["arguments"].as_str().unwrap().to_owned(),
                        },
                    );
                }
                if m["role"] != "tool" {
                    continue;
                }
                n += 1;
                let call = &calls[m["tool_call_id"].as_str().unwrap()];
                let r = reduce_one(
                    Some(call),
                    &call.name,
                    m["content"].as_str().unwrap().as_bytes(),
                    false,
                    n,
                );
                let obs = &r.step.observation;
                assert!(
                    !obs.is_empty() && !obs.contains('\n') && obs.chars().count() <= 200,
                    "{file}: {obs:?}"
                );
                // Every tool seen gets a reducer that says more than the generic fallback would,
                // except the domain tools of tau-bench and FireAct's `finish`, which have none.
                if r.step.kind == ToolKind::Unknown {
                    assert!(
                        file == TAU
                            || call.name == "finish"
                            || call.name == "decompile"
                            || call.name == "submit",
                        "{file}: {} is unmapped",
                        call.name
                    );
                }
            }
        }
    }
}

#[test]
fn secrets_in_output_and_arguments_are_masked() {
    let call = ToolCall {
        id: "c1".into(),
        name: "bash".into(),
        arguments: r#"{"command": "curl -H 'Authorization: Bearer abcdefghijklmnopqrstuvwxyz' https://api.x"}"#.into(),
    };
    let out = "<returncode>0</returncode>\n<output>\nOPENAI_API_KEY=sk-proj-abcdefghijklmnopqrstuvwx\n</output>";
    let r = reduce_one(Some(&call), "bash", out.as_bytes(), false, 1);
    assert_eq!(r.step.observation, "`curl -H 'Authorization: Bearer ***' https://api.x` exit 0, 1 line: OPENAI_API_KEY=sk-proj-***");
    assert!(!serde_json::to_string(&r.step)
        .unwrap()
        .contains("abcdefghijklmnop"));
    let cat = ToolCall {
        id: "c2".into(),
        name: "Read".into(),
        arguments: r#"{"file_path": ".env"}"#.into(),
    };
    let r = reduce_one(
        Some(&cat),
        "Read",
        b"password=hunter2\nAWS=AKIAIOSFODNN7EXAMPLE\n",
        true,
        2,
    );
    assert_eq!(r.step.observation, "Read .env failed: AWS=AKIA***");
    assert_eq!(r.step.error.as_deref(), Some("AWS=AKIA***"));
}

#[test]
fn binary_and_non_utf8_results_are_described_and_offloaded() {
    let call = ToolCall {
        id: "c1".into(),
        name: "Read".into(),
        arguments: r#"{"file_path": "logo.png"}"#.into(),
    };
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    png.extend(std::iter::repeat_n(0u8, 3000));
    let r = reduce_one(Some(&call), "Read", &png, false, 7);
    assert_eq!(
        r.step.observation,
        "Read → PNG image, 2.9 KB (binary, not shown)"
    );
    assert_eq!(r.offload.as_deref(), Some("outputs/file_007.png"));
    assert_eq!(
        r.step.blob.as_ref().map(BlobRef::hex),
        Some(ContentStats::of(&png).sha256.as_str())
    );
    assert_eq!(r.step.minimal_args["file_path"], "logo.png");
    let latin1 = b"caf\xe9 au lait";
    let r = reduce_one(Some(&call), "Read", latin1, false, 8);
    assert_eq!(
        r.step.observation,
        "Read → binary data, 12 B (binary, not shown)"
    );
    assert_eq!(r.offload.as_deref(), Some("outputs/file_008.bin"));
}

#[test]
fn malformed_arguments_still_give_a_correct_step() {
    let call = ToolCall {
        id: "c1".into(),
        name: "bash".into(),
        arguments: r#"{"command": "ls -la"#.into(),
    };
    let r = reduce_one(Some(&call), "bash", b"a\nb\n", false, 1);
    assert!(r.step.success);
    assert_eq!(r.step.facts["malformed_arguments"], true);
    assert_eq!(r.step.observation, "`{\"command\": \"ls -la` 2 lines: a");
    let call = ToolCall {
        id: "c2".into(),
        name: "get_order".into(),
        arguments: "{order: 12".into(),
    };
    let r = reduce_one(
        Some(&call),
        "get_order",
        b"{\"status\": \"shipped\"}",
        false,
        2,
    );
    assert_eq!(r.step.observation, r#"{"status": "shipped"}"#);
    assert_eq!(r.step.minimal_args["raw"], "{order: 12");
}

#[test]
fn results_without_a_call_are_reduced_by_their_tool_name() {
    let r = reduce_one(
        None,
        "execute_bash",
        b"hello\n[The command completed with exit code 0.]",
        false,
        3,
    );
    assert_eq!(r.step.observation, "exit 0, 1 line: hello");
    assert_eq!(r.step.facts["orphan"], true);
    assert_eq!(r.step.call_id, "orphan");
}

#[test]
fn huge_outputs_are_described_from_the_whole_and_offloaded() {
    let call = ToolCall {
        id: "c1".into(),
        name: "execute_bash".into(),
        arguments: r#"{"command": "cat big.log"}"#.into(),
    };
    let line =
        "0123456789 abcdefghij ABCDEFGHIJ 0123456789 abcdefghij ABCDEFGHIJ 0123456789 abcdefghij\n";
    let big = line.repeat(100 * 1024 * 1024 / line.len());
    let r = reduce_one(Some(&call), "execute_bash", big.as_bytes(), false, 12);
    let lines = big.len() / line.len();
    assert_eq!(
        r.step.observation,
        format!("Read big.log (100.0 MB, {lines} lines, text)")
    );
    assert_eq!(r.offload.as_deref(), Some("outputs/file_012.txt"));
    assert_eq!(r.step.stats.lines, lines as u64);
}

#[test]
fn tool_errors_are_failures_even_when_the_output_looks_fine() {
    let call = ToolCall {
        id: "c1".into(),
        name: "Write".into(),
        arguments: r#"{"file_path": "a.txt", "content": "x"}"#.into(),
    };
    let r = reduce_one(Some(&call), "Write", b"Permission denied", true, 1);
    assert!(!r.step.success);
    assert_eq!(
        r.step.observation,
        "Write to a.txt failed: Permission denied"
    );
    let ok = reduce_one(
        Some(&call),
        "Write",
        b"File created successfully at: a.txt",
        false,
        2,
    );
    assert_eq!(ok.step.observation, "Wrote a.txt (1 line, 1 B)");
    assert!(
        !ok.step.minimal_args.contains_key("content"),
        "written content is never kept"
    );
}

#[test]
fn claude_code_and_openhands_tools() {
    let grep = ToolCall {
        id: "g".into(),
        name: "Grep".into(),
        arguments: r#"{"pattern": "fn main", "output_mode": "files_with_matches"}"#.into(),
    };
    let r = reduce_one(
        Some(&grep),
        "Grep",
        b"Found 2 files\nsrc/main.rs\nsrc/bin/x.rs\n",
        false,
        1,
    );
    assert_eq!(
        r.step.observation,
        "Searched 'fn main': 2 matches in 2 files: src/bin/x.rs, src/main.rs"
    );
    let edit = ToolCall {
        id: "e".into(),
        name: "str_replace_editor".into(),
        arguments:
            r#"{"command": "str_replace", "path": "/w/a.py", "old_str": "a\nb", "new_str": "c"}"#
                .into(),
    };
    let r = reduce_one(
        Some(&edit),
        "str_replace_editor",
        b"The file /w/a.py has been edited.",
        false,
        2,
    );
    assert_eq!(
        r.step.observation,
        "Edited /w/a.py: replaced 2 lines with 1"
    );
    let view = ToolCall {
        id: "v".into(),
        name: "str_replace_editor".into(),
        arguments: r#"{"command": "view", "path": "/w"}"#.into(),
    };
    let r = reduce_one(Some(&view), "str_replace_editor", b"Here's the files and directories up to 2 levels deep in /w, excluding hidden items:\n/w/\n/w/a.py\n/w/src/\n", false, 3);
    assert_eq!(
        r.step.observation,
        "Listed /w: 3 entries (1 files, 2 dirs): /w/, /w/a.py, /w/src/"
    );
    let patch = ToolCall { id: "p".into(), name: "apply_patch".into(), arguments: r#"{"input": "*** Begin Patch\n*** Update File: src/a.rs\n@@\n-x\n+y\n+z\n*** Add File: b.rs\n+fn b() {}\n*** End Patch"}"#.into() };
    let r = reduce_one(Some(&patch), "apply_patch", b"Done!", false, 4);
    assert_eq!(
        r.step.observation,
        "Patched 2 files: src/a.rs (+2 -1), b.rs (new)"
    );
}

#[test]
fn compact_templates_render_real_steps() {
    let step = check(
        MINI,
        "astropy__astropy-13977",
        3,
        true,
        None,
        "`python3 reproduce_issue.py` exit 0, 3 lines: Attempting: (1 * u.m) + DuckArray(1 * u.mm)",
    );
    let t = Templates::default();
    assert_eq!(
        t.compact(&step).summary,
        "Ran `python3 reproduce_issue.py` (exit 0)"
    );
    let read = check(
        MINI,
        "astropy__astropy-13977",
        4,
        true,
        Some("outputs/file_004.txt"),
        "Read astropy/units/quantity.py lines 600-650 (2.4 KB, 51 lines, Python); defines __array_wrap__, __array_ufunc__; uses obj.__dict__, self._set_unit, self.info, obj.info, self._new_view, github.com",
    );
    assert_eq!(
        t.compact(&read).summary,
        "Read astropy/units/quantity.py (2.4 KB)"
    );
}
