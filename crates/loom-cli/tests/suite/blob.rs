//! `loom blob` writes an offloaded output's original bytes and refuses anything path-like.

use super::Loom;

#[test]
fn a_large_result_round_trips_through_the_blob_store() {
    let loom = Loom::new();
    // Above the 1 MiB default limit, with escapes and multi-byte characters.
    let output = "row \"quoted\" — ✓\t{\"k\": [1, 2]}\n".repeat(50_000);
    assert!(output.len() > 1 << 20);
    let f = loom.file("big.json", super::chat_with_output(&output));
    let report = loom.import(&[&f]);
    assert_eq!(report["blobs"], 1);
    let log = loom.run(["log", "big", "--json"]).ok().json();
    let result = &log[2];
    let reference = result["content"]["blob"].as_str().unwrap();
    assert_eq!(result["stats"]["bytes"], output.len());
    assert_eq!(result["stats"]["lines"], 50_000);
    assert_eq!(
        reference,
        format!("sha256:{}", result["stats"]["sha256"].as_str().unwrap())
    );
    let run = loom.run(["blob", reference]).ok();
    assert!(
        run.stdout == output.as_bytes(),
        "blob bytes differ from the original"
    );
    let human = loom
        .run(["log", "big", "--from", "3", "--to", "3"])
        .ok()
        .stdout();
    assert!(human.contains(&format!("in blob {reference}")), "{human}");
}

#[test]
fn references_that_are_paths_or_unknown_are_refused() {
    let loom = Loom::new();
    let f = loom.file("c.json", super::chat_with_output("x"));
    loom.import(&[&f]);
    for bad in [
        "../../etc/passwd",
        "/etc/passwd",
        "sha256:../x",
        "blobs/ab/cd",
    ] {
        let run = loom.run(["blob", bad]);
        assert_eq!(run.code, 2, "{bad}: {}", run.stderr);
        assert!(run.stderr.contains("refused"), "{bad}: {}", run.stderr);
        assert!(run.stdout.is_empty());
    }
    let missing = format!("sha256:{}", "0".repeat(64));
    let run = loom.run(["blob", &missing]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("not found"), "{}", run.stderr);
}
