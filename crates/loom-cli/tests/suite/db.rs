//! `--db` picks the backend (a path is SQLite, `postgres://` is PostgreSQL, anything else is
//! refused), and `loom db migrate` says which schema version the database is at.

use loom_testkit::pg::fresh_schema;

use super::Loom;

#[test]
fn an_unknown_scheme_is_refused_and_creates_nothing() {
    let loom = Loom::new();
    for db in ["mysql://loom@127.0.0.1/loom", "sqlite://loom.db", ""] {
        for args in [
            &["sessions"][..],
            &["keys", "create", "--tenant", "acme"],
            &["db", "migrate"],
        ] {
            let run = loom.run_on(db, args);
            assert_eq!(run.code, 2, "{db:?} {args:?}: {}", run.stderr);
            assert!(run.stderr.contains("is refused"), "{}", run.stderr);
        }
    }
    // Nothing was taken for a path: no `mysql:` or `sqlite:` folder, no database file.
    let left: Vec<_> = std::fs::read_dir(loom.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn migrate_reports_the_sqlite_schema_version() {
    let loom = Loom::new();
    let run = loom.run(["db", "migrate"]).ok();
    let expected = format!(
        "{}: schema version {}\n",
        loom.db().display(),
        loom_store::SqliteStore::schema_version()
    );
    assert_eq!(run.stdout(), expected);
    assert!(loom.db().is_file());
}

#[test]
fn commands_run_against_postgres() {
    let Some(schema) = fresh_schema() else {
        return;
    };
    let loom = Loom::new();
    let run = loom.run_on(&schema.url, ["db", "migrate"]).ok();
    assert!(
        run.stdout().ends_with(&format!(
            ": schema version {}\n",
            loom_store::PgStore::schema_version()
        )),
        "{}",
        run.stdout()
    );
    // A session imported through the CLI is in the database, and so are its blobs.
    let f = loom.file("chat.json", super::chat_with_output("line one\nline two\n"));
    let import = loom.run_on(
        &schema.url,
        ["import".as_ref(), "--json".as_ref(), f.as_os_str()],
    );
    let import = import.ok();
    assert!(
        import.stdout().contains("\"sessions\""),
        "{}",
        import.stdout()
    );
    let sessions = loom.run_on(&schema.url, ["sessions", "--json"]).ok().json();
    assert_eq!(sessions.as_array().map(Vec::len), Some(1), "{sessions}");
    let session = sessions[0]["id"].as_str().unwrap().to_owned();
    let log = loom.run_on(&schema.url, ["log", &session]).ok();
    assert!(log.stdout().contains("line one"), "{}", log.stdout());

    // Keys live there too.
    let secret = loom
        .run_on(&schema.url, ["keys", "create", "--tenant", "acme"])
        .ok()
        .stdout();
    assert!(secret.starts_with("lk_"), "{secret}");
    let listed = loom
        .run_on(&schema.url, ["keys", "list", "--json"])
        .ok()
        .json();
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");
    assert_eq!(listed[0]["tenant"], "acme");

    // Nothing was written beside the working folder but the import's input.
    let left: Vec<_> = std::fs::read_dir(loom.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, ["chat.json"]);
}

#[test]
fn migrate_refuses_a_newer_postgres_schema() {
    let Some(schema) = fresh_schema() else {
        return;
    };
    let loom = Loom::new();
    loom.run_on(&schema.url, ["db", "migrate"]).ok();
    let newer = loom_store::PgStore::schema_version() + 1;
    schema
        .connect()
        .execute(
            "INSERT INTO loom_migrations (version, name) VALUES ($1, 'from the future')",
            &[&newer],
        )
        .unwrap();
    let run = loom.run_on(&schema.url, ["db", "migrate"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr
            .contains(&format!("schema version {newer} is newer")),
        "{}",
        run.stderr
    );
}
