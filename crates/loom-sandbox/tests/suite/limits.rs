//! Limits: a fork bomb, endless loops (wall clock and CPU), a left-behind background child,
//! huge output and big files are all stopped, nothing is left running, and the run goes on.

use std::time::{Duration, Instant};

use loom_sandbox::{Command, Exit, Limit, Limits};

use super::{assert_run_goes_on, marker, processes_with, sh, text, workspace};

fn tasks_on_machine() -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        .count()
}

#[test]
fn a_fork_bomb_is_stopped_and_leaves_nothing_behind() {
    let (dir, sandbox) = workspace();
    let sandbox = sandbox.limits(Limits {
        wall_time: Duration::from_secs(3),
        processes: Some(64),
        ..Limits::default()
    });
    let before = tasks_on_machine();
    let mark = marker();
    // The marker names the script, so every forked copy of the shell carries it.
    let script = dir.path().join(format!("bomb{mark}.sh"));
    std::fs::write(&script, "f() { f | f & }; f; sleep 30\n").unwrap();
    let started = Instant::now();
    let outcome = sandbox.run(&Command::new("/bin/sh").arg(&script)).unwrap();
    let took = started.elapsed();
    assert!(took < Duration::from_secs(20), "took {took:?}");
    assert!(outcome.limit.is_some(), "{outcome:?}");
    let left = processes_with(&format!("bomb{mark}"));
    assert!(left.is_empty(), "left running: {left:?}");
    // The machine's process count is back where it was once init has reaped the killed shells
    // (other tests and other work on the machine move it a little; a surviving bomb would be
    // far above).
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut after = tasks_on_machine();
    while after >= before + 40 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        after = tasks_on_machine();
    }
    assert!(after < before + 40, "before {before}, after {after}");
    assert_run_goes_on(&sandbox, dir.path());
}

#[test]
fn an_endless_loop_is_killed_by_the_wall_clock() {
    let (dir, sandbox) = workspace();
    let sandbox = sandbox.limits(Limits {
        wall_time: Duration::from_millis(1500),
        cpu_time: None,
        ..Limits::default()
    });
    let outcome = sh(&sandbox, "while :; do :; done");
    assert!(outcome.timed_out, "{outcome:?}");
    assert_eq!(outcome.limit, Some(Limit::WallTime));
    assert_eq!(outcome.exit, Exit::Signal(libc_sigkill()));
    assert!(outcome.wall_time >= Duration::from_millis(1500));
    assert!(outcome.wall_time < Duration::from_secs(6), "{outcome:?}");
    assert_run_goes_on(&sandbox, dir.path());
}

#[test]
fn an_endless_loop_is_killed_by_cpu_time() {
    let (dir, sandbox) = workspace();
    // A generous wall clock: on a loaded machine one CPU second can take many wall seconds.
    let sandbox = sandbox.limits(Limits {
        wall_time: Duration::from_secs(90),
        cpu_time: Some(Duration::from_secs(1)),
        ..Limits::default()
    });
    let outcome = sh(&sandbox, "while :; do :; done");
    assert!(!outcome.timed_out, "{outcome:?}");
    assert_eq!(outcome.limit, Some(Limit::CpuTime), "{outcome:?}");
    // CPU accounting is sampled: the kernel's count at the signal may read a tick short.
    assert!(
        outcome.cpu_time >= Duration::from_millis(900),
        "{outcome:?}"
    );
    assert_run_goes_on(&sandbox, dir.path());
}

fn libc_sigkill() -> i32 {
    9
}

#[test]
fn background_children_are_killed_with_the_command() {
    let (dir, sandbox) = workspace();
    let mark = marker();
    let started = Instant::now();
    // One child stays in the process group; one leaves it with setsid (the cgroup still has it).
    let script = format!("sleep 1{mark} & setsid sleep 2{mark} & echo started");
    let outcome = sh(&sandbox, &script);
    assert!(started.elapsed() < Duration::from_secs(5), "{outcome:?}");
    assert!(outcome.success(), "{outcome:?}");
    assert_eq!(text(&outcome.stdout), "started\n");
    // Killed processes may take a moment to be reaped by init.
    let deadline = Instant::now() + Duration::from_secs(3);
    while !processes_with(&mark).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(processes_with(&mark), Vec::<String>::new());
    assert_run_goes_on(&sandbox, dir.path());
}

#[test]
fn huge_output_is_capped_and_flagged() {
    let (dir, sandbox) = workspace();
    let cap = 4 << 20;
    let sandbox = sandbox.limits(Limits {
        output_bytes: cap,
        ..Limits::default()
    });
    let started = Instant::now();
    let outcome = sh(&sandbox, "head -c 100000000 /dev/zero; echo tail-marker");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert!(outcome.truncated);
    assert_eq!(outcome.limit, Some(Limit::Output));
    assert_eq!(outcome.stdout.len(), cap);
    assert!(outcome.stdout.iter().all(|b| *b == 0));
    // An endless writer is stopped the same way.
    let outcome = sh(&sandbox, "yes");
    assert!(
        outcome.truncated && outcome.stdout.len() == cap,
        "{}",
        outcome.stdout.len()
    );
    assert_run_goes_on(&sandbox, dir.path());

    // Under the cap everything comes back whole, stdout and stderr apart.
    let outcome = sh(&sandbox, "head -c 3000000 /dev/zero; echo err >&2");
    assert!(!outcome.truncated, "{outcome:?}");
    assert_eq!(outcome.stdout.len(), 3_000_000);
    assert_eq!(text(&outcome.stderr), "err\n");
}

#[test]
fn big_files_stop_at_the_file_size_limit() {
    let (dir, sandbox) = workspace();
    let sandbox = sandbox.limits(Limits {
        file_size_bytes: Some(1 << 20),
        ..Limits::default()
    });
    let outcome = sandbox
        .run(
            &Command::new("head")
                .arg("-c")
                .arg("5000000")
                .arg("/dev/zero")
                .arg("-"),
        )
        .unwrap();
    assert!(
        outcome.success(),
        "output to a pipe is not a file: {outcome:?}"
    );
    let outcome = sh(&sandbox, "exec head -c 5000000 /dev/zero > big.bin");
    assert_eq!(outcome.limit, Some(Limit::FileSize), "{outcome:?}");
    let size = std::fs::metadata(dir.path().join("big.bin")).unwrap().len();
    assert_eq!(size, 1 << 20);
    assert_run_goes_on(&sandbox, dir.path());
}

#[test]
fn memory_beyond_the_limit_cannot_be_allocated() {
    let (dir, sandbox) = workspace();
    let sandbox = sandbox.limits(Limits {
        memory_bytes: Some(512 << 20),
        ..Limits::default()
    });
    let outcome = sh(
        &sandbox,
        "python3 -c 'x = bytearray(1 << 30); print(len(x))'",
    );
    assert!(!outcome.success(), "{outcome:?}");
    assert!(text(&outcome.stderr).contains("MemoryError"), "{outcome:?}");
    let outcome = sh(
        &sandbox,
        "python3 -c 'x = bytearray(1 << 20); print(len(x))'",
    );
    assert!(outcome.success(), "{outcome:?}");
    assert_run_goes_on(&sandbox, dir.path());
}
