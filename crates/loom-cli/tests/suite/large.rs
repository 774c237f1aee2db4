//! A 100 MB tool result is streamed to the blob store without being held twice in memory.
//!
//! Ignored by default (it writes 100 MB and needs `/usr/bin/time`); run it with
//! `cargo test -p loom-cli --release --test all -- --ignored large`.

use std::io::Write;
use std::process::Command;

use super::Loom;

const RESULT_BYTES: usize = 100 * 1024 * 1024;

#[test]
#[ignore = "writes 100 MB; run with --ignored"]
fn a_100_mb_result_imports_under_twice_its_size_in_peak_memory() {
    let loom = Loom::new();
    let path = loom.dir.path().join("huge.json");
    let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    write!(
        f,
        r#"[{{"role": "user", "content": "dump"}}, {{"role": "assistant", "tool_calls": [{{"id": "c", "type": "function", "function": {{"name": "cat", "arguments": "{{}}"}}}}]}}, {{"role": "tool", "tool_call_id": "c", "content": ""#
    )
    .unwrap();
    // The escapes make the parser unescape into its own buffer, the worst case for memory.
    let line = r#"0123456789 \"quoted\" abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRS\n"#;
    let decoded_line = serde_json::from_str::<String>(&format!("\"{line}\""))
        .unwrap()
        .len();
    let lines = RESULT_BYTES / decoded_line;
    for _ in 0..lines {
        f.write_all(line.as_bytes()).unwrap();
    }
    f.write_all(br#""}]"#).unwrap();
    f.flush().unwrap();
    drop(f);

    let out = Command::new("/usr/bin/time")
        .arg("-v")
        .arg(env!("CARGO_BIN_EXE_loom"))
        .args(["import", "--json"])
        .arg(&path)
        .arg("--db")
        .arg(loom.db())
        .output()
        .expect("/usr/bin/time is needed (apt-get install time)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let peak_kb: usize = stderr
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("Maximum resident set size (kbytes): ")
        })
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no peak RSS in: {stderr}"));
    let peak = peak_kb * 1024;
    let result = lines * decoded_line;
    eprintln!(
        "100 MB result: peak RSS {:.1} MiB for a {:.1} MiB result ({:.2}x)",
        peak as f64 / 1048576.0,
        result as f64 / 1048576.0,
        peak as f64 / result as f64
    );
    assert!(
        peak < result * 3 / 2,
        "peak RSS {peak} is not well under 2x {result}"
    );

    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["blobs"], 1);
    let log = loom.run(["log", "huge", "--json"]).ok().json();
    assert_eq!(log[2]["stats"]["bytes"], result);
    let reference = log[2]["content"]["blob"].as_str().unwrap().to_owned();
    let blob = loom.run(["blob", &reference]).ok();
    assert_eq!(blob.stdout.len(), result);
    assert!(blob.stdout.starts_with(b"0123456789 \"quoted\" abc"));
}
