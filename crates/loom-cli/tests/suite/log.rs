//! `loom log` and `loom sessions`: human and JSON forms, ranges, unknown sessions.

use super::Loom;

#[test]
fn log_prints_one_line_per_event() {
    let loom = Loom::with_chat();
    let out = loom.run(["log", "chat"]).ok().stdout();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "{out}");
    assert!(lines[0].starts_with("    1  user"), "{out}");
    assert!(
        lines[1].contains("assistant") && lines[1].contains("-> cat({}) [c1]"),
        "{out}"
    );
    assert!(
        lines[2].contains("tool_result")
            && lines[2].contains("cat [c1] 18 B, 2 lines, text: line one line two"),
        "{out}"
    );
    assert!(lines[3].ends_with("done"), "{out}");
}

#[test]
fn log_json_is_the_documented_event_form_and_honours_the_range() {
    let loom = Loom::with_chat();
    let all = loom.run(["log", "chat", "--json"]).ok().json();
    let events: Vec<loom_core::Event> = serde_json::from_value(all.clone()).unwrap();
    assert_eq!(
        events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        [1, 2, 3, 4]
    );
    let part = loom
        .run(["log", "chat", "--from", "2", "--to", "3", "--json"])
        .ok()
        .json();
    assert_eq!(part.as_array().unwrap()[..], all.as_array().unwrap()[1..3]);
    let tail = loom.run(["log", "chat", "--from", "4"]).ok().stdout();
    assert_eq!(tail.lines().count(), 1);
}

#[test]
fn unknown_sessions_and_bad_ranges_are_bad_input() {
    let loom = Loom::with_chat();
    let run = loom.run(["log", "nope"]);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.contains("session `nope` not found"),
        "{}",
        run.stderr
    );
    let run = loom.run(["log", "chat", "--from", "3", "--to", "2"]);
    assert_eq!(run.code, 2);
    let run = loom.run(["log", "chat", "--from", "0"]);
    assert_eq!(run.code, 2);
}

#[test]
fn reading_commands_do_not_create_a_database() {
    let loom = Loom::new();
    let run = loom.run(["sessions"]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("no database at"), "{}", run.stderr);
    assert!(!loom.db().exists());
}

#[test]
fn a_deleted_session_is_gone_and_the_others_stay() {
    let loom = Loom::with_chat();
    let other = loom.file(
        "other.json",
        super::chat_with_output("kept line\n").replace("show me", "show the other"),
    );
    let mut args: Vec<std::ffi::OsString> = vec!["import".into(), "--session".into()];
    args.push("other".into());
    args.push(other.into_os_string());
    loom.run(args).ok();
    let ids = |loom: &Loom| -> Vec<String> {
        loom.sessions()
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["id"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(ids(&loom), ["chat", "other"]);
    let out = loom
        .run(["sessions", "--delete", "chat", "--json"])
        .ok()
        .json();
    assert_eq!(out["id"], "chat");
    assert_eq!(out["events"], 4);
    assert_eq!(ids(&loom), ["other"]);
    let again = loom.run(["sessions", "--delete", "chat"]);
    assert_eq!(again.code, 2, "{}", again.stderr);
    assert!(
        again.stderr.contains("session `chat` not found"),
        "{}",
        again.stderr
    );
    loom.run(["log", "other"]).ok();
}
