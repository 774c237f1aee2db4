//! The knowledge base: chunks with their line ranges, replacement on re-add, search under a
//! budget, removal, and scopes that never see each other.

use loom_memory::{FileKind, Memory, MemoryError};

use super::support::conformance;

const GUIDE: &str = "# Deploying\n\nRun `make deploy` from the release branch.\n\n\
## Rollback\n\nTo roll back, run `make rollback VERSION=prev`; the canary stays up.\n\n\
## Secrets\n\nSecrets live in the vault under ops/deploy.\n";

fn a_file_is_chunked_searched_with_its_lines_and_replaced_when_it_changes(m: &dyn Memory) {
    let added = m.kb_add("", "docs/guide.md", GUIDE, 1).unwrap();
    assert_eq!(added.kind, FileKind::Markdown);
    assert_eq!(added.chunks, 3);
    assert!(!added.unchanged);
    let hits = m.kb_search("", "how do I roll back", 500, 5).unwrap();
    assert_eq!(hits[0].path, "docs/guide.md");
    assert_eq!((hits[0].from_line, hits[0].to_line), (5, 8));
    assert_eq!(hits[0].heading.as_deref(), Some("Rollback"));
    assert!(hits[0].text.contains("make rollback"));
    // The budget holds.
    let small = m
        .kb_search("", "deploy rollback secrets vault", 30, 10)
        .unwrap();
    assert!(small.iter().map(|h| h.tokens).sum::<u64>() <= 30);
    // The same content again changes nothing; a changed file replaces its chunks.
    assert!(m.kb_add("", "docs/guide.md", GUIDE, 2).unwrap().unchanged);
    let changed = m
        .kb_add(
            "",
            "docs/guide.md",
            "# Deploying\n\nDeploys are automatic now.\n",
            3,
        )
        .unwrap();
    assert_eq!((changed.chunks, changed.replaced), (1, 3));
    assert!(m.kb_search("", "rollback", 500, 5).unwrap().is_empty());
    let list = m.kb_list("").unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!((list[0].chunks, list[0].added_ms), (1, 3));
    assert_eq!(m.kb_remove("", "docs/guide.md").unwrap(), 1);
    assert!(m.kb_list("").unwrap().is_empty());
    assert!(matches!(
        m.kb_remove("", "docs/guide.md"),
        Err(MemoryError::InvalidInput { field: "file", .. })
    ));
}

fn scopes_never_see_each_others_files(m: &dyn Memory) {
    m.kb_add("tenant-a", "guide.md", GUIDE, 1).unwrap();
    assert!(m
        .kb_search("tenant-b", "rollback", 500, 5)
        .unwrap()
        .is_empty());
    assert!(m.kb_search("", "rollback", 500, 5).unwrap().is_empty());
    assert!(m.kb_list("tenant-b").unwrap().is_empty());
    assert!(m.kb_remove("tenant-b", "guide.md").is_err());
    assert_eq!(
        m.kb_search("tenant-a", "rollback", 500, 5).unwrap().len(),
        1
    );
}

fn code_and_json_keep_their_structure(m: &dyn Memory) {
    let code = "use std::io;\n\n/// Parses the port.\nfn parse_port(s: &str) -> u16 {\n    s.parse().unwrap_or(80)\n}\n";
    m.kb_add("", "src/port.rs", code, 1).unwrap();
    let hits = m.kb_search("", "parse port", 500, 5).unwrap();
    assert_eq!(hits[0].path, "src/port.rs");
    assert!(hits[0].text.contains("fn parse_port"));
    let json = "{\n  \"timeout_ms\": 3000,\n  \"retries\": {\"max\": 5}\n}\n";
    m.kb_add("", "config.json", json, 1).unwrap();
    let hits = m.kb_search("", "retries", 500, 5).unwrap();
    assert_eq!(hits[0].heading.as_deref(), Some("retries"));
    assert_eq!((hits[0].from_line, hits[0].to_line), (3, 4));
    assert!(m.kb_add("", "bad.json", "{\"a\":", 1).is_err());
}

conformance!(
    a_file_is_chunked_searched_with_its_lines_and_replaced_when_it_changes,
    scopes_never_see_each_others_files,
    code_and_json_keep_their_structure,
);
