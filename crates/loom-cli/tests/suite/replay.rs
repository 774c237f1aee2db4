//! `loom replay`, `loom render` and `loom explain` on the shipped sample and the shared traces.

use serde_json::Value;

use super::{Loom, TRACES};

const SAMPLE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../examples/sample-trajectories.jsonl"
);

fn all_row(summaries: &Value) -> &Value {
    summaries
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["scope"] == "all")
        .unwrap()
}

#[test]
fn replay_of_the_sample_fits_and_recovers_every_reference() {
    let loom = Loom::new();
    let out = loom.dir.path().join("requests.jsonl");
    let report = loom.dir.path().join("report");
    let run = loom
        .run([
            "replay",
            SAMPLE,
            "--budget",
            "3000",
            "--json",
            "--emit-requests",
            out.to_str().unwrap(),
            "--report",
            report.to_str().unwrap(),
        ])
        .ok();
    let text = run.stdout();
    let json_end = text.rfind(']').unwrap();
    let sums: Value = serde_json::from_str(&text[..=json_end]).unwrap();
    let all = all_row(&sums);
    assert_eq!(all["loom"]["over_budget"], 0);
    assert_eq!(all["loom"]["orphans"], 0);
    assert!(
        all["full"]["over_budget"].as_u64().unwrap() > 0,
        "the sample must overflow 3k"
    );
    assert!(all["compaction_points"].as_u64().unwrap() > 0);
    assert_eq!(all["refs_failed"], 0);
    assert!(all["refs_checked"].as_u64().unwrap() > 0);
    assert!(
        run.stderr.contains("high_watermark"),
        "effective policy printed: {}",
        run.stderr
    );
    assert!(report.join("index.html").exists());

    // One line per assistant message after the first message, pointing at it.
    let sample: Vec<Value> = std::fs::read_to_string(SAMPLE)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let emitted: Vec<Value> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let expected: usize = sample
        .iter()
        .map(|t| {
            t["messages"]
                .as_array()
                .unwrap()
                .iter()
                .skip(1)
                .filter(|m| m["role"] == "assistant")
                .count()
        })
        .sum();
    assert_eq!(emitted.len(), expected);
    for line in &emitted {
        let traj = sample.iter().find(|t| t["id"] == line["trace_id"]).unwrap();
        let k = line["call"].as_u64().unwrap() as usize;
        assert_eq!(traj["messages"][k]["role"], "assistant");
        let tokens_fit = line["request"]["messages"].as_array().unwrap().len();
        assert!(tokens_fit >= 2);
    }
}

/// The summaries without their render timings, which differ from run to run.
fn untimed(stdout: &str) -> Value {
    let mut sums: Value = serde_json::from_str(stdout.trim()).unwrap();
    for s in sums.as_array_mut().unwrap() {
        let s = s.as_object_mut().unwrap();
        s.retain(|k, _| !k.starts_with("render_p"));
    }
    sums
}

#[test]
fn replay_is_the_same_on_any_number_of_threads() {
    let loom = Loom::new();
    let replay = |jobs: &str| {
        let out = loom.dir.path().join(format!("requests-{jobs}.jsonl"));
        let run = loom
            .run([
                "replay",
                SAMPLE,
                SAMPLE,
                "--budget",
                "3000",
                "--json",
                "--jobs",
                jobs,
                "--emit-requests",
                out.to_str().unwrap(),
            ])
            .ok();
        (untimed(&run.stdout()), std::fs::read(&out).unwrap())
    };
    let (one, one_requests) = replay("1");
    assert!(one.as_array().unwrap().len() > 1, "{one}");
    assert!(!one_requests.is_empty());
    for jobs in ["2", "5"] {
        let (many, many_requests) = replay(jobs);
        assert_eq!(many, one, "--jobs {jobs}");
        // Byte for byte, in the order of the input.
        assert!(
            many_requests == one_requests,
            "--jobs {jobs}: requests differ"
        );
    }
    let run = loom.run(["replay", SAMPLE, "--budget", "3000", "--jobs", "0"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("--jobs"), "{}", run.stderr);
}

#[test]
fn replay_refuses_bad_input_with_exit_2() {
    let loom = Loom::new();
    let bad = loom.file(
        "bad.jsonl",
        "{\"id\": \"x\", \"messages\": [{\"role\": \"wizard\"}]}\n",
    );
    let run = loom.run(["replay", bad.to_str().unwrap(), "--budget", "1000"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("bad.jsonl"), "{}", run.stderr);
    let run = loom.run([
        "replay",
        SAMPLE,
        "--budget",
        "1000",
        "--model",
        "gpt-99-turbo",
    ]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    let policy = loom.file("p.toml", "high_watermark = 0.5\nlow_watermark = 0.9\n");
    let run = loom.run([
        "replay",
        SAMPLE,
        "--budget",
        "1000",
        "--policy",
        policy.to_str().unwrap(),
    ]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("low_watermark"), "{}", run.stderr);
}

/// The original message in the keys and form Loom's OpenAI Chat renderer uses.
fn canonical(m: &Value) -> Value {
    let mut out = serde_json::Map::new();
    for key in ["role", "content", "name", "tool_call_id"] {
        match m.get(key) {
            Some(Value::Null) if key == "content" && m["role"] == "assistant" => {
                out.insert(key.into(), Value::Null);
            }
            Some(Value::Null) | None => {}
            Some(v) => {
                out.insert(key.into(), v.clone());
            }
        }
    }
    if let Some(Value::Array(calls)) = m.get("tool_calls") {
        if !calls.is_empty() {
            let calls: Vec<Value> = calls
                .iter()
                .map(|c| {
                    serde_json::json!({
                        "id": c["id"],
                        "type": "function",
                        "function": {"name": c["function"]["name"], "arguments": c["function"]["arguments"]},
                    })
                })
                .collect();
            out.insert("tool_calls".into(), Value::Array(calls));
        }
    }
    if m["role"] == "assistant" && !out.contains_key("content") {
        out.insert("content".into(), Value::Null);
    }
    Value::Object(out)
}

/// The original messages with reused call ids renamed as the importer documents
/// (docs/formats.md): the n-th use of an id after its first call was answered becomes `<id>_r<n>`,
/// and results follow the newest name.
fn with_import_ids(msgs: &[Value]) -> Vec<Value> {
    let mut uses: std::collections::HashMap<String, u32> = std::collections::HashMap::new();
    let mut current: std::collections::HashMap<String, String> = std::collections::HashMap::new();
    msgs.iter()
        .map(|m| {
            let mut m = m.clone();
            if let Some(Value::Array(calls)) = m.get_mut("tool_calls") {
                for c in calls {
                    let id = c["id"].as_str().unwrap().to_owned();
                    let n = uses.entry(id.clone()).or_insert(0);
                    *n += 1;
                    let name = if *n == 1 {
                        id.clone()
                    } else {
                        format!("{id}_r{n}")
                    };
                    c["id"] = Value::String(name.clone());
                    current.insert(id, name);
                }
            }
            if let Some(id) = m
                .get("tool_call_id")
                .and_then(Value::as_str)
                .map(str::to_owned)
            {
                if let Some(name) = current.get(&id) {
                    m["tool_call_id"] = Value::String(name.clone());
                }
            }
            m
        })
        .collect()
}

/// Issue 7: while a trajectory fits, Loom's request is the full history, byte for byte (call ids
/// as imported).
#[test]
fn requests_equal_the_full_history_while_it_fits() {
    for file in [
        "tau_bench_airline_gpt4o.jsonl",
        "fireact_hotpotqa__gpt4_react_sft.jsonl",
    ] {
        let loom = Loom::new();
        let path = format!("{TRACES}/{file}");
        let out = loom.dir.path().join("requests.jsonl");
        loom.run([
            "replay",
            &path,
            "--budget",
            "16000",
            "--emit-requests",
            out.to_str().unwrap(),
        ])
        .ok();
        let trajs: std::collections::HashMap<String, Vec<Value>> = std::fs::read_to_string(&path)
            .unwrap()
            .lines()
            .map(|l| {
                let v: Value = serde_json::from_str(l).unwrap();
                (
                    v["id"].as_str().unwrap().to_owned(),
                    v["messages"].as_array().unwrap().clone(),
                )
            })
            .collect();
        let mut checked = 0;
        for line in std::fs::read_to_string(&out).unwrap().lines() {
            let line: Value = serde_json::from_str(line).unwrap();
            let msgs = &trajs[line["trace_id"].as_str().unwrap()];
            let k = line["call"].as_u64().unwrap() as usize;
            let expected: Vec<Value> = with_import_ids(&msgs[..k]).iter().map(canonical).collect();
            let got = line["request"]["messages"].as_array().unwrap();
            assert_eq!(
                serde_json::to_string(got).unwrap(),
                serde_json::to_string(&expected).unwrap(),
                "{file}: {} call {k}",
                line["trace_id"]
            );
            checked += 1;
        }
        assert!(checked > 900, "{file}: only {checked} calls");
    }
}

#[test]
fn render_records_a_receipt_and_explain_reads_it() {
    let loom = Loom::new();
    loom.import(&[std::path::Path::new(SAMPLE)]);
    let session = "sample/calc-unary-minus";
    let body = loom
        .run(["render", session, "--budget", "3000"])
        .ok()
        .json();
    assert_eq!(body["model"], "gpt-4o");
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(messages[0]["role"], "system");
    // Rendering again without new events records nothing new and gives the same bytes.
    let again = loom
        .run(["render", session, "--budget", "3000"])
        .ok()
        .json();
    assert_eq!(again, body);
    let fates = loom
        .run([
            "explain", session, "--event", "8", "--budget", "3000", "--json",
        ])
        .ok()
        .json();
    let fates = fates.as_array().unwrap();
    assert_eq!(fates.len(), 1, "one recorded model call: {fates:?}");
    let fate = fates[0]["fate"].as_str().unwrap();
    assert!(
        ["verbatim", "stubbed", "thinned", "grouped", "dropped", "elided"]
            .iter()
            .any(|f| fate.starts_with(f)),
        "{fate}"
    );
    let anthropic = loom
        .run([
            "render",
            session,
            "--budget",
            "3000",
            "--format",
            "anthropic",
        ])
        .ok()
        .json();
    assert!(anthropic["system"].is_array());
    let missing = loom.run(["explain", session, "--event", "999"]);
    assert_eq!(missing.code, 2);
}
