//! Sandbox start cost per command: `/bin/true` (and `sh -c true`) spawned and waited for with
//! plain `std::process::Command`, through the sandbox unsandboxed (process group, cgroup,
//! scratch dir, output loop) and through the sandbox enforced (plus Landlock, seccomp and the
//! capability drop). The target is enforced minus plain under 5 ms.

#![expect(clippy::unwrap_used, reason = "a benchmark fails loudly")]

use std::hint::black_box;
use std::process::Stdio;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use loom_sandbox::{Command, Mode, Sandbox};

fn plain(program: &str, args: &[&str]) {
    let output = std::process::Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(output.status.success());
}

fn start_cost(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let enforced = Sandbox::new(dir.path());
    let unsandboxed = Sandbox::new(dir.path()).mode(Mode::Unsandboxed);
    let mut group = c.benchmark_group("start");
    group.sample_size(100);
    group.measurement_time(Duration::from_secs(8));
    for (name, program, args) in [
        ("true", "/bin/true", &[][..]),
        ("sh -c true", "/bin/sh", &["-c", "true"][..]),
    ] {
        let mut command = Command::new(program);
        for arg in args {
            command = command.arg(arg);
        }
        group.bench_function(format!("{name}/plain"), |b| {
            b.iter(|| plain(black_box(program), args));
        });
        group.bench_function(format!("{name}/unsandboxed"), |b| {
            b.iter(|| assert!(unsandboxed.run(black_box(&command)).unwrap().success()));
        });
        group.bench_function(format!("{name}/sandboxed"), |b| {
            b.iter(|| assert!(enforced.run(black_box(&command)).unwrap().success()));
        });
    }
    group.finish();
}

criterion_group!(benches, start_cost);
criterion_main!(benches);
