//! `loom run` and `loom approve`: the offline demo end to end, a run killed with SIGKILL in the
//! middle of a tool call and resumed without losing or duplicating the call, runs against the
//! mock provider over HTTP, and their model calls' spans as a collector receives them.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::Loom;

const EXAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/agent");

#[test]
fn the_demo_runs_offline_pauses_for_approval_and_finishes() {
    let out = Command::new("bash")
        .arg(format!("{EXAMPLES}/demo.sh"))
        .env("LOOM_BIN", env!("CARGO_BIN_EXE_loom"))
        .env_remove("LOOM_DB")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stdout: {stdout}\nstderr: {stderr}");
    // The first run paused for `rm build.log` (exit 3); approval and --resume finished it.
    assert!(stdout.contains("(exit 3"), "{stdout}");
    assert!(stderr.contains("waits for approval"), "{stderr}");
    assert!(
        stdout.contains("return a + b"),
        "the fix was written: {stdout}"
    );
    assert!(
        stderr.contains("✓ main system:shell: PASS"),
        "the tests pass after the fix: {stderr}"
    );
    // The child agent ran in its own session, and the long listing was cut at a compaction point.
    assert!(stderr.contains("main.1 system:shell"), "{stderr}");
    assert!(stdout.contains("compaction point"), "{stdout}");
    assert!(
        stdout.contains("loom recall outputs/"),
        "the listing is kept whole: {stdout}"
    );
}

fn wait_for(loom: &Loom, session: &str, what: impl Fn(&serde_json::Value) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let log = loom.run(["log", session, "--json"]);
        if log.code == 0 && what(&log.json()) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting on the log of {session}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_run_killed_during_a_tool_call_resumes_without_losing_or_repeating_it() {
    let loom = Loom::new();
    let ws = loom.dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let script = loom.file(
        "script.json",
        serde_json::to_vec(&serde_json::json!([
            {"content": null, "tool_calls": [{"function": {"name": "system__shell",
                "arguments": {"command": "sleep 2; echo ran >> marks.txt"}}}]},
            {"content": "done"}
        ]))
        .unwrap(),
    );
    let config = loom.file(
        "run.toml",
        "approval = \"on-request\"\n[exec_policy]\nfile = \"policy.toml\"\n",
    );
    loom.file(
        "policy.toml",
        "[[rule]]\nname = \"sleepy\"\nprefix = [\"sleep\"]\ndecision = \"allow\"\nmatch = [\"sleep 2\"]\n\n\
         [[rule]]\nname = \"echo\"\nprefix = [\"echo\"]\ndecision = \"allow\"\nmatch = [\"echo ran\"]\n",
    );
    let args = |extra: &[&str]| {
        let mut a: Vec<String> = ["run", "--model", "gpt-4o", "--provider", "scripted"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        a.extend(["--script".into(), script.display().to_string()]);
        a.extend(["--config".into(), config.display().to_string()]);
        a.extend(["--workspace".into(), ws.display().to_string()]);
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    let mut child = Command::new(env!("CARGO_BIN_EXE_loom"))
        .args(args(&["--session", "killed", "count to one"]))
        .arg("--db")
        .arg(loom.db())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .env_remove("LOOM_DB")
        .spawn()
        .unwrap();
    // Kill it once the model's turn (the call) is in the log, while the command sleeps.
    wait_for(&loom, "killed", |log| {
        log.as_array()
            .is_some_and(|events| events.iter().any(|e| e["kind"] == "assistant"))
    });
    std::thread::sleep(Duration::from_millis(300));
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    assert!(
        !ws.join("marks.txt").exists(),
        "the killed call had not finished"
    );

    let resumed = loom.run(args(&["--resume", "killed"]));
    assert_eq!(resumed.code, 0, "{}", resumed.stderr);
    assert!(
        resumed.stderr.contains("answer: done"),
        "{}",
        resumed.stderr
    );
    let log = loom.run(["log", "killed", "--json"]).ok().json();
    let kinds: Vec<&str> = log
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["system", "user", "assistant", "tool_result", "assistant"],
        "one call, one result"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("marks.txt")).unwrap(),
        "ran\n",
        "the command ran once to its end"
    );
}

#[test]
fn approve_refuses_what_is_not_waiting() {
    let loom = Loom::new();
    let missing = loom.run(["approve", "nope", "call_1", "--once"]);
    assert_eq!(missing.code, 2, "{}", missing.stderr);
    let bad = loom.run(["run", "--model", "gpt-4o", "--provider", "scripted", "goal"]);
    assert_eq!(bad.code, 2);
    assert!(bad.stderr.contains("--script"), "{}", bad.stderr);
}

/// The mock provider on a loopback port, served by the runtime returned with it (which must
/// outlive it).
fn mock_upstream() -> (tokio::runtime::Runtime, loom_mock_upstream::MockHandle) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let upstream = rt
        .block_on(loom_mock_upstream::Mock::new().serve("127.0.0.1:0".parse().unwrap()))
        .unwrap();
    (rt, upstream)
}

/// `loom run` of `model` over provider API `api` at `base_url` in a fresh home, as session
/// `session`, told to read the notes, with `env` set: the home and the process's output.
fn run_against(
    base_url: &str,
    api: &str,
    model: &str,
    session: &str,
    env: &[(&str, &str)],
) -> (Loom, std::process::Output) {
    let loom = Loom::new();
    let ws = loom.dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let config = loom.file(
        "run.toml",
        format!(
            "[provider]\napi = \"{api}\"\nbase_url = \"{base_url}\"\napi_key_env = \"LOOM_TEST_KEY\"\n"
        ),
    );
    let out = Command::new(env!("CARGO_BIN_EXE_loom"))
        .args(["run", "--model", model, "--budget", "8000", "--config"])
        .arg(&config)
        .arg("--workspace")
        .arg(&ws)
        .args(["--session", session, "read the notes please"])
        .arg("--db")
        .arg(loom.db())
        .env("LOOM_TEST_KEY", "sk-test")
        .envs(env.iter().copied())
        .env_remove("LOOM_DB")
        .output()
        .unwrap();
    (loom, out)
}

#[test]
fn a_run_talks_to_each_provider_api_over_http() {
    let (_rt, upstream) = mock_upstream();
    for (api, model) in [
        ("chat_completions", "gpt-4o"),
        ("responses", "gpt-4o"),
        ("messages", "claude-sonnet-4-5"),
    ] {
        let (loom, out) = run_against(&upstream.base_url(), api, model, "live", &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{api}: {stderr}");
        // The mock calls the first tool offered (with arguments it does not know), gets the
        // error result, and answers.
        assert!(
            stderr.contains("✗ main fs:read_file: bad arguments"),
            "{api}: {stderr}"
        );
        assert!(stderr.contains("answer: ok:"), "{api}: {stderr}");
        // The provider's usage is recorded against each call's receipt.
        let log = loom.run(["log", "live", "--json"]).ok().json();
        assert_eq!(
            log.as_array().unwrap().len(),
            5,
            "{api}: system, user, call, result, answer"
        );
        let explain = loom.run(["explain", "live", "--event", "2"]).ok().stdout();
        assert!(explain.contains("call 2"), "{api}: {explain}");
    }
}

#[test]
fn a_runs_model_calls_are_spans_with_the_session_agent_turn_and_receipt() {
    use loom_testkit::otlp::{attributes, Collector, SpanKind};

    let collector = Collector::start().unwrap();
    let (_rt, upstream) = mock_upstream();
    let mut seen = 0;
    for (api, model, system) in [
        ("chat_completions", "gpt-4o", "openai"),
        ("messages", "claude-sonnet-4-5", "anthropic"),
    ] {
        let (loom, out) = run_against(
            &upstream.base_url(),
            api,
            model,
            "traced",
            &[("LOOM_OTLP_ENDPOINT", collector.url())],
        );
        assert!(
            out.status.success(),
            "{api}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // The mock calls a tool, then answers: two model calls, two spans, sent before the
        // process exits.
        let got = collector.wait_for(seen + 2, Duration::from_secs(10));
        let spans = &got[seen..];
        seen = got.len();
        assert_eq!(spans.len(), 2, "{api}: {spans:#?}");
        let receipts: Vec<serde_json::Value> = loom
            .run(["log", "traced", "--json"])
            .ok()
            .json()
            .as_array()
            .unwrap()
            .clone();
        assert_eq!(
            receipts.len(),
            5,
            "{api}: system, user, call, result, answer"
        );
        let mut turns = Vec::new();
        for received in spans {
            assert_eq!(received.service, "loom-run", "{api}");
            let span = &received.span;
            assert_eq!(
                span.kind,
                SpanKind::Client as i32,
                "{api}: Loom makes the call"
            );
            assert_eq!(span.name, format!("chat {model}"));
            assert!(span.end_time_unix_nano >= span.start_time_unix_nano);
            let a = attributes(span);
            for (key, value) in [
                ("gen_ai.operation.name", "chat"),
                ("gen_ai.system", system),
                ("gen_ai.provider.name", system),
                ("gen_ai.request.model", model),
                ("session.id", "traced"),
                ("loom.agent", "main"),
                ("loom.agent.depth", "0"),
            ] {
                assert_eq!(
                    a.get(key).map(String::as_str),
                    Some(value),
                    "{api}: {key} in {a:#?}"
                );
            }
            assert!(
                a["gen_ai.response.model"].starts_with(model),
                "{api}: {a:#?}"
            );
            assert!(
                a.contains_key("gen_ai.response.finish_reasons"),
                "{api}: {a:#?}"
            );
            for key in [
                "gen_ai.usage.input_tokens",
                "gen_ai.usage.output_tokens",
                "loom.budget",
                "loom.estimate",
                "loom.events.verbatim",
            ] {
                assert!(
                    a.get(key)
                        .and_then(|v| v.parse::<u64>().ok())
                        .is_some_and(|n| n > 0),
                    "{api}: {key} in {a:#?}"
                );
            }
            assert_eq!(a["loom.compaction_point"], "false", "{api}: {a:#?}");
            assert!(!a.contains_key("error.type"), "{api}: {a:#?}");
            turns.push((
                a["loom.turn"].parse::<u32>().unwrap(),
                a["loom.receipt.id"].parse::<u64>().unwrap(),
                a["loom.events.verbatim"].parse::<u64>().unwrap(),
            ));
        }
        turns.sort_unstable();
        // Turn 1 sends the system prompt and the goal; turn 2 also the call and its result,
        // under the next receipt.
        assert_eq!(turns.len(), 2);
        assert_eq!((turns[0].0, turns[1].0), (1, 2), "{api}: {turns:?}");
        assert!(turns[0].1 < turns[1].1, "{api}: {turns:?}");
        assert_eq!((turns[0].2, turns[1].2), (2, 4), "{api}: {turns:?}");
        // Each span's receipt is a model call the goal was sent in, as `loom explain` tells.
        let explain = loom
            .run(["explain", "traced", "--event", "2"])
            .ok()
            .stdout();
        for (_, receipt, _) in &turns {
            assert!(
                explain.contains(&format!("call {receipt}")),
                "{api}: {explain}"
            );
        }
    }
}
