//! `loom steps`, `loom recall` and `loom export-steps` on a real trace: observations, references
//! that return the original bytes, the seeds' export layout, and refusals.

use super::{Loom, TRACES};

const SESSION: &str =
    "sweagent_traj/dev/sweagent_traj/trajectories/demonstrations/ctf/crypto/BabyEncryption.traj";

/// The `n`th tool output (1-based) of the BabyEncryption trajectory, as the trace holds it.
fn original_output(n: usize) -> String {
    let text = std::fs::read_to_string(format!("{TRACES}/sweagent_traj.jsonl")).unwrap();
    let traj: serde_json::Value = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|t| t["id"] == SESSION)
        .unwrap();
    let tools: Vec<&serde_json::Value> = traj["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .collect();
    tools[n - 1]["content"].as_str().unwrap().to_owned()
}

fn imported() -> Loom {
    let loom = Loom::new();
    loom.import(&[std::path::Path::new(&format!(
        "{TRACES}/sweagent_traj.jsonl"
    ))]);
    loom
}

#[test]
fn steps_list_observations_and_references() {
    let loom = imported();
    let steps = loom.run(["steps", SESSION, "--json"]).ok().json();
    let steps = steps.as_array().unwrap();
    assert_eq!(steps.len(), 14);
    let failed = &steps[3];
    assert_eq!(failed["id"], "step_004");
    assert_eq!(failed["tool_name"], "python");
    assert_eq!(
        failed["observation"],
        "`python decrypt.py` 6 lines: TypeError: integer argument expected, got float"
    );
    assert_eq!(failed["outcome_ref"], "outputs/shell_004.log");
    assert_eq!(failed["success"], false);
    assert!(failed["call_id"].as_str().is_some_and(|c| !c.is_empty()));
    let text = loom.run(["steps", SESSION]).ok().stdout();
    assert!(
        text.contains("step_004  FAIL  `python decrypt.py` 6 lines: TypeError: integer argument expected, got float  [outputs/shell_004.log]"),
        "{text}"
    );
    // Deriving again gives the same steps.
    let again = loom
        .run(["steps", SESSION, "--json", "--rebuild"])
        .ok()
        .json();
    assert_eq!(again.as_array().unwrap(), steps);
}

#[test]
fn recall_returns_the_original_bytes() {
    let loom = imported();
    loom.run(["steps", SESSION]).ok();
    let run = loom
        .run(["recall", "outputs/shell_004.log", "--session", SESSION])
        .ok();
    assert!(
        run.stdout == original_output(4).as_bytes(),
        "recalled bytes differ"
    );
    let steps = loom.run(["steps", SESSION, "--json"]).ok().json();
    let blob = steps[3]["blob"].as_str().unwrap();
    assert_eq!(
        blob,
        format!("sha256:{}", steps[3]["stats"]["sha256"].as_str().unwrap())
    );
    assert!(loom.run(["recall", blob]).ok().stdout == run.stdout);
}

#[test]
fn recall_refuses_ambiguous_unknown_and_unsafe_references() {
    let loom = imported();
    // shell_002.log exists in several sessions, naming different outputs.
    let run = loom.run(["recall", "outputs/shell_002.log"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("pass --session"), "{}", run.stderr);
    for (bad, says) in [
        ("outputs/none_001.log", "not found"),
        ("../../etc/passwd", "refused"),
        ("/etc/passwd", "refused"),
    ] {
        let run = loom.run(["recall", bad, "--session", SESSION]);
        assert_eq!(run.code, 2, "{bad}: {}", run.stderr);
        assert!(run.stderr.contains(says), "{bad}: {}", run.stderr);
        assert!(run.stdout.is_empty());
    }
    let run = loom.run(["steps", "no-such-session"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
}

#[test]
fn export_writes_the_seed_layout_inside_dir_only() {
    let loom = imported();
    let out = loom.dir.path().join("ws");
    let run = loom
        .run(["export-steps", SESSION, out.to_str().unwrap()])
        .ok();
    assert!(
        run.stdout().contains("wrote 14 steps and 4 outputs"),
        "{}",
        run.stdout()
    );
    let step: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("history/step_004.json")).unwrap()).unwrap();
    assert_eq!(step["outcome_ref"], "outputs/shell_004.log");
    let compact = std::fs::read_to_string(out.join("history/step_004.compact")).unwrap();
    assert_eq!(
        compact,
        "`python decrypt.py` 6 lines: TypeError: integer argument expected, got float (failed)\n"
    );
    assert_eq!(
        std::fs::read(out.join("outputs/shell_004.log")).unwrap(),
        original_output(4).into_bytes()
    );
    assert_eq!(std::fs::read_dir(out.join("history")).unwrap().count(), 28);
    #[cfg(unix)]
    {
        let elsewhere = loom.dir.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        let linked = loom.dir.path().join("linked");
        std::os::unix::fs::symlink(&elsewhere, &linked).unwrap();
        let run = loom.run(["export-steps", SESSION, linked.to_str().unwrap()]);
        assert_eq!(run.code, 2, "{}", run.stderr);
        assert!(run.stderr.contains("symlink"), "{}", run.stderr);
        let inner = loom.dir.path().join("ws2");
        std::fs::create_dir_all(&inner).unwrap();
        std::os::unix::fs::symlink(&elsewhere, inner.join("outputs")).unwrap();
        let run = loom.run(["export-steps", SESSION, inner.to_str().unwrap()]);
        assert_eq!(run.code, 2, "{}", run.stderr);
        assert_eq!(
            std::fs::read_dir(&elsewhere).unwrap().count(),
            0,
            "wrote through a symlink"
        );
    }
}
