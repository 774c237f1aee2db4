//! The filesystem, network and privilege boundaries: each escape fails, the same command without
//! the sandbox succeeds (so the test can fail), and the run goes on.

use std::io::Write;
use std::net::TcpListener;
use std::path::PathBuf;

use loom_sandbox::{Command, Mode};

use super::{assert_run_goes_on, sh, text, workspace};

#[test]
fn writing_outside_the_workspace_fails_and_leaves_no_file() {
    let (dir, sandbox) = workspace();
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("escaped.txt");
    let script = format!("echo pwned > '{}'", target.display());
    let outcome = sh(&sandbox, &script);
    assert!(!outcome.success(), "{outcome:?}");
    assert!(!target.exists());
    for script in [
        format!("touch '{}'", target.display()),
        format!("mkdir '{}'", outside.path().join("d").display()),
        format!("ln -s /etc/passwd '{}'", target.display()),
        "echo x > /etc/loom-sandbox-escape".to_owned(),
    ] {
        let outcome = sh(&sandbox, &script);
        assert!(!outcome.success(), "{script}: {outcome:?}");
    }
    assert!(!target.exists());
    assert!(!outside.path().join("d").exists());
    assert!(!std::path::Path::new("/etc/loom-sandbox-escape").exists());
    assert_run_goes_on(&sandbox, dir.path());

    // Without the sandbox the same write lands: the check above is not vacuous.
    let outcome = sh(&sandbox.clone().mode(Mode::Unsandboxed), &script);
    assert!(outcome.success(), "{outcome:?}");
    assert!(target.exists());
}

#[test]
fn reading_a_secret_outside_the_workspace_fails() {
    let (dir, sandbox) = workspace();
    let vault = tempfile::tempdir().unwrap();
    let secret = vault.path().join("secret.txt");
    std::fs::File::create(&secret)
        .unwrap()
        .write_all(b"hunter2-secret")
        .unwrap();
    let script = format!(
        "cat '{}'; ls '{}'",
        secret.display(),
        vault.path().display()
    );
    let outcome = sh(&sandbox, &script);
    assert!(!text(&outcome.stdout).contains("hunter2"), "{outcome:?}");
    assert!(!text(&outcome.stdout).contains("secret.txt"), "{outcome:?}");
    assert!(
        text(&outcome.stderr).contains("Permission denied"),
        "{outcome:?}"
    );
    assert_run_goes_on(&sandbox, dir.path());

    // Listing the directory as readable lets it through: the readable list is what decides.
    let mut readable: Vec<_> = loom_sandbox::DEFAULT_READABLE
        .iter()
        .map(std::path::PathBuf::from)
        .collect();
    readable.push(vault.path().to_path_buf());
    let outcome = sh(&sandbox.clone().readable(readable), &script);
    assert!(text(&outcome.stdout).contains("hunter2"), "{outcome:?}");
}

#[test]
fn the_parent_environment_does_not_leak() {
    let (_dir, sandbox) = workspace();
    // None of the test process's own variables is passed on.
    let outcome = sh(&sandbox, "env");
    let env = text(&outcome.stdout);
    assert!(env.contains("HOME="), "{env}");
    // What the sandbox passes on, and what the shell sets itself.
    let passed_on = [
        "PATH", "HOME", "TMPDIR", "LANG", "TERM", "PWD", "OLDPWD", "SHLVL", "_",
    ];
    for (key, _) in std::env::vars().filter(|(k, _)| !passed_on.contains(&k.as_str())) {
        assert!(
            !env.contains(&format!("\n{key}=")) && !env.starts_with(&format!("{key}=")),
            "{key}"
        );
    }
    let outcome = sh(&sandbox.clone().env("LOOM_TEST", "yes"), "echo $LOOM_TEST");
    assert_eq!(text(&outcome.stdout), "yes\n");
}

fn connect_script(port: u16) -> String {
    format!(
        "python3 -c \"import socket; \
         s = socket.create_connection(('127.0.0.1', {port}), timeout=3); print('connected')\""
    )
}

#[test]
fn tcp_connections_and_inet_sockets_are_refused() {
    let (dir, sandbox) = workspace();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let outcome = sh(&sandbox, &connect_script(port));
    assert!(!outcome.success(), "{outcome:?}");
    assert!(!text(&outcome.stdout).contains("connected"));
    assert!(
        text(&outcome.stderr).contains("PermissionError")
            || text(&outcome.stderr).contains("not permitted"),
        "{outcome:?}"
    );
    assert!(
        listener.accept().is_err(),
        "a connection reached the listener"
    );

    for family in [
        "AF_INET, socket.SOCK_DGRAM",
        "AF_INET6",
        "AF_PACKET, socket.SOCK_RAW",
    ] {
        let script =
            format!("python3 -c 'import socket; socket.socket(socket.{family}); print(1)'");
        let outcome = sh(&sandbox, &script);
        assert!(!outcome.success(), "{family}: {outcome:?}");
    }
    // Local sockets stay available (tools talk to their own helpers over them).
    let outcome = sh(
        &sandbox,
        "python3 -c 'import socket; a, b = socket.socketpair(); a.send(b\"x\"); print(b.recv(1))'",
    );
    assert!(outcome.success(), "{outcome:?}");
    assert_run_goes_on(&sandbox, dir.path());

    // With the network allowed the same connection goes through.
    let outcome = sh(&sandbox.clone().network(true), &connect_script(port));
    assert!(text(&outcome.stdout).contains("connected"), "{outcome:?}");
}

#[test]
fn capabilities_are_dropped_and_privileges_cannot_be_regained() {
    let (dir, sandbox) = workspace();
    let outcome = sh(
        &sandbox,
        "grep -E '^(CapEff|CapPrm|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status",
    );
    let status = text(&outcome.stdout);
    for line in [
        "CapEff:\t0000000000000000",
        "CapPrm:\t0000000000000000",
        "CapBnd:\t0000000000000000",
        "NoNewPrivs:\t1",
        "Seccomp:\t2",
    ] {
        assert!(status.contains(line), "{line} missing in {status}");
    }
    // Raising a hard limit needs CAP_SYS_RESOURCE, which is gone.
    let outcome = sh(&sandbox, "ulimit -n 4096 && echo raised");
    assert!(!text(&outcome.stdout).contains("raised"), "{outcome:?}");
    assert_run_goes_on(&sandbox, dir.path());
}

#[test]
fn a_program_outside_the_readable_list_cannot_be_executed() {
    let (_dir, sandbox) = workspace();
    let elsewhere = tempfile::tempdir().unwrap();
    let program = elsewhere.path().join("tool");
    std::fs::copy("/bin/true", &program).unwrap();
    let err = sandbox.run(&Command::new(&program)).unwrap_err();
    let message = err.to_string();
    assert!(message.contains("cannot start"), "{message}");
    assert!(message.contains("tool"), "{message}");
}

#[test]
fn processes_outside_the_sandbox_cannot_be_inspected_or_signalled() {
    let (dir, sandbox) = workspace();
    // A sandboxed command must not read the test process's environment from /proc.
    let parent = std::process::id();
    let script = format!("cat /proc/{parent}/environ; echo; kill -0 {parent} && echo signalled");
    // One of the test process's own variables, as /proc shows it.
    let (key, value) = std::env::vars()
        .next()
        .expect("the test process has an environment");
    let needle = format!("{key}={value}");
    let outcome = sh(&sandbox, &script);
    assert!(!text(&outcome.stdout).contains(&needle), "{needle} leaked");
    // Unsandboxed, the same command reads it and signals.
    let open = sh(&sandbox.clone().mode(Mode::Unsandboxed), &script);
    assert!(
        text(&open.stdout).contains(&needle),
        "unsandboxed read failed"
    );
    assert!(text(&open.stdout).contains("signalled"), "{open:?}");
    let scoped = loom_sandbox::probe()
        .landlock_abi
        .is_some_and(|abi| abi >= 6);
    if scoped {
        assert!(!text(&outcome.stdout).contains("signalled"), "{outcome:?}");
    }
    assert_run_goes_on(&sandbox, dir.path());
}

#[test]
fn io_uring_and_foreign_syscall_abis_are_refused() {
    let (dir, sandbox) = workspace();
    // io_uring can open sockets without socket(2); its setup call is refused outright.
    let outcome = sh(
        &sandbox,
        "python3 -c 'import ctypes, os; libc = ctypes.CDLL(None, use_errno=True); \
         r = libc.syscall(425, 1, ctypes.create_string_buffer(120)); \
         print(r, os.strerror(ctypes.get_errno()))'",
    );
    assert_eq!(
        text(&outcome.stdout),
        "-1 Operation not permitted\n",
        "{outcome:?}"
    );
    if cfg!(target_arch = "x86_64") {
        // An x32 socket call (the same number with the x32 bit) would slip past a filter that
        // only compared numbers; the filter kills the process instead.
        let outcome = sh(
            &sandbox,
            "exec python3 -c 'import ctypes; ctypes.CDLL(None).syscall(0x40000000 + 41, 2, 1, 0)'",
        );
        assert_eq!(outcome.exit, loom_sandbox::Exit::Signal(31), "{outcome:?}");
    }
    assert_run_goes_on(&sandbox, dir.path());
}

#[test]
fn hidden_paths_stay_closed_inside_readable_directories() {
    let (dir, sandbox) = workspace();
    let shared = tempfile::tempdir().unwrap();
    std::fs::write(shared.path().join(".env"), "API_KEY=sk-hidden").unwrap();
    std::fs::write(shared.path().join("open.txt"), "visible").unwrap();
    let mut readable: Vec<_> = loom_sandbox::DEFAULT_READABLE
        .iter()
        .map(PathBuf::from)
        .collect();
    readable.push(shared.path().to_path_buf());
    let mut hidden: Vec<_> = loom_sandbox::DEFAULT_HIDDEN
        .iter()
        .map(PathBuf::from)
        .collect();
    hidden.push(shared.path().join(".env"));
    let sandbox = sandbox.readable(readable).hidden(hidden);
    let script = format!(
        "cd '{}'; cat /etc/shadow; cat .env; cat open.txt; head -c 4 /etc/passwd",
        shared.path().display()
    );
    let outcome = sh(&sandbox, &script);
    let out = text(&outcome.stdout);
    assert!(!out.contains("root:"), "{outcome:?}");
    assert!(!out.contains("sk-hidden"), "{outcome:?}");
    assert!(out.contains("visible"), "{outcome:?}");
    assert!(
        out.ends_with("root"),
        "/etc/passwd stays readable: {outcome:?}"
    );
    assert_run_goes_on(&sandbox, dir.path());
    let open = sh(&sandbox.clone().mode(Mode::Unsandboxed), &script);
    assert!(text(&open.stdout).contains("sk-hidden"), "{open:?}");

    // Inside the workspace nothing can be hidden: its own entries would become read-only.
    let err = sandbox
        .hidden([dir.path().join(".env")])
        .run(&Command::shell("true"))
        .unwrap_err();
    assert!(err.to_string().contains("hidden"), "{err}");
}
