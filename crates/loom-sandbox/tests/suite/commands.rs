//! Ordinary work inside the workspace: common tools run, the workspace and a private scratch
//! directory are writable, exits and signals are reported, and bad commands are errors.

use loom_sandbox::{probe, Command, Error, Exit, Mode, Sandbox};

use super::{sh, text, workspace};

#[test]
fn the_kernel_here_enforces_the_sandbox() {
    let support = probe();
    assert!(
        support.landlock_abi.is_some_and(|abi| abi >= 1),
        "{support:?}"
    );
    assert!(support.seccomp, "{support:?}");
}

#[test]
fn common_tools_work_in_the_workspace() {
    let (dir, sandbox) = workspace();
    std::fs::write(dir.path().join("notes.txt"), "alpha\nbeta\n").unwrap();
    let outcome = sh(&sandbox, "ls && cat notes.txt && wc -l notes.txt");
    assert!(outcome.success(), "{outcome:?}");
    assert_eq!(
        text(&outcome.stdout),
        "notes.txt\nalpha\nbeta\n2 notes.txt\n"
    );

    let outcome = sh(
        &sandbox,
        "python3 -c 'import sys, tempfile; \
         tempfile.TemporaryFile().write(b\"x\"); print(sys.version_info[0])'",
    );
    assert!(outcome.success(), "{outcome:?}");
    assert_eq!(text(&outcome.stdout), "3\n");

    let outcome = sh(
        &sandbox,
        "git init -q repo && cd repo && echo hi > a.txt && git status --short && \
         git -c user.email=a@b -c user.name=a add a.txt && \
         git -c user.email=a@b -c user.name=a commit -qm first && git log --oneline | wc -l",
    );
    assert!(outcome.success(), "{outcome:?}");
    assert_eq!(text(&outcome.stdout), "?? a.txt\n1\n");

    let outcome = sh(
        &sandbox,
        "mkdir -p d/e && mv notes.txt d/e/ && rm -r d && ls",
    );
    assert!(outcome.success(), "{outcome:?}");
    assert_eq!(text(&outcome.stdout), "repo\n");

    let outcome = sh(&sandbox, "t=$(mktemp) && echo scratch > $t && cat $t");
    assert_eq!(text(&outcome.stdout), "scratch\n", "{outcome:?}");
}

#[test]
fn exit_codes_signals_and_stdin_are_reported() {
    let (_dir, sandbox) = workspace();
    let outcome = sh(&sandbox, "echo out; echo err >&2; exit 3");
    assert_eq!(outcome.exit, Exit::Code(3));
    assert!(!outcome.success());
    assert_eq!(outcome.limit, None);
    assert_eq!(
        (text(&outcome.stdout), text(&outcome.stderr)),
        ("out\n".into(), "err\n".into())
    );
    let outcome = sh(&sandbox, "kill -TERM $$");
    assert_eq!(outcome.exit, Exit::Signal(15));
    let outcome = sandbox
        .run(&Command::new("cat").stdin("given input"))
        .unwrap();
    assert_eq!(text(&outcome.stdout), "given input");
    let outcome = sandbox.run(&Command::new("cat")).unwrap();
    assert!(
        outcome.success() && outcome.stdout.is_empty(),
        "stdin is /dev/null: {outcome:?}"
    );
    assert!(outcome.sandboxed);
}

#[test]
fn a_command_that_cannot_start_is_an_error_naming_it() {
    let (_dir, sandbox) = workspace();
    let err = sandbox
        .run(&Command::new("no-such-program-xyz").arg("--flag"))
        .unwrap_err();
    assert!(matches!(err, Error::Spawn { .. }), "{err:?}");
    assert!(
        err.to_string().contains("no-such-program-xyz --flag"),
        "{err}"
    );
    let err = Sandbox::new("relative/dir")
        .run(&Command::shell("true"))
        .unwrap_err();
    assert!(err.to_string().contains("workspace"), "{err}");
    let err = Sandbox::new("/nonexistent/loom")
        .run(&Command::shell("true"))
        .unwrap_err();
    assert!(err.to_string().contains("/nonexistent/loom"), "{err}");
    let err = sandbox
        .clone()
        .readable(["etc"])
        .run(&Command::shell("true"))
        .unwrap_err();
    assert!(err.to_string().contains("readable"), "{err}");
}

#[test]
fn unsandboxed_runs_are_explicit_and_reported() {
    let (_dir, sandbox) = workspace();
    let outcome = sh(
        &sandbox.mode(Mode::Unsandboxed),
        "cat /proc/self/status | grep NoNewPrivs",
    );
    assert!(!outcome.sandboxed);
    assert_eq!(text(&outcome.stdout), "NoNewPrivs:\t0\n");
}

#[test]
fn commands_run_from_many_threads_at_once() {
    let (_dir, sandbox) = workspace();
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..8)
            .map(|i| {
                let sandbox = &sandbox;
                scope.spawn(move || sh(sandbox, &format!("echo {i} > f{i} && cat f{i}")))
            })
            .collect();
        for (i, handle) in handles.into_iter().enumerate() {
            let outcome = handle.join().unwrap();
            assert_eq!(text(&outcome.stdout), format!("{i}\n"), "{outcome:?}");
        }
    });
}

#[test]
fn a_replaced_workspace_gets_fresh_rules() {
    let (dir, sandbox) = workspace();
    assert!(sh(&sandbox, "echo one > a.txt").success());
    // The rules made for the first run name the old directory's inode; a new directory at the
    // same path must be writable all the same.
    std::fs::remove_dir_all(dir.path()).unwrap();
    std::fs::create_dir(dir.path()).unwrap();
    let outcome = sh(&sandbox, "echo two > b.txt && cat b.txt");
    assert!(outcome.success(), "{outcome:?}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("b.txt")).unwrap(),
        "two\n"
    );
}

#[test]
fn pipelines_end_the_usual_way() {
    let (_dir, sandbox) = workspace();
    // The writer dies of SIGPIPE quietly, as in a terminal (Loom's own ignored SIGPIPE is not
    // inherited).
    let outcome = sh(&sandbox, "yes | head -n 2");
    assert!(outcome.success(), "{outcome:?}");
    assert_eq!(text(&outcome.stdout), "y\ny\n");
    assert!(outcome.stderr.is_empty(), "{outcome:?}");
}
