//! Running a parallel group: one thread per hook, each under its own timeout.
//!
//! Threads are detached rather than scoped: a scoped thread cannot be abandoned, and a hook that
//! hangs must not hang the turn. A late answer goes into a channel nobody reads any more.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use loom_core::render::Injection;

use super::{panic_message, HookStatus, ParallelGroup, TurnView};

type Answer = Result<Vec<String>, HookStatus>;

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Runs every hook of `group` at once; returns their answers in declaration order.
pub(super) fn run(
    group: &ParallelGroup,
    turn: &Arc<TurnView>,
    so_far: &Arc<[Injection]>,
) -> Vec<Answer> {
    let n = group.hooks.len();
    let mut answers: Vec<Option<Answer>> = vec![None; n];
    let (tx, rx) = mpsc::channel::<(usize, Answer)>();
    let start = Instant::now();
    for (i, (hook, _)) in group.hooks.iter().enumerate() {
        let (tx, hook, turn, so_far) = (
            tx.clone(),
            Arc::clone(hook),
            Arc::clone(turn),
            Arc::clone(so_far),
        );
        let spawned = thread::Builder::new()
            .name(format!("loom-hook-{}", hook.name()))
            .spawn(move || {
                let answer = match catch_unwind(AssertUnwindSafe(|| hook.run(&turn, &so_far))) {
                    Ok(Ok(texts)) => Ok(texts),
                    Ok(Err(e)) => Err(HookStatus::Failed {
                        error: e.to_string(),
                    }),
                    Err(payload) => Err(HookStatus::Panicked {
                        message: panic_message(payload.as_ref()),
                    }),
                };
                // The receiver is gone when the hook timed out: nothing to do then.
                let _ = tx.send((i, answer));
            });
        if let Err(e) = spawned {
            answers[i] = Some(Err(HookStatus::Failed {
                error: format!("could not start its thread: {e}"),
            }));
        }
    }
    drop(tx);

    let deadline = |i: usize| start + group.hooks[i].1;
    loop {
        let pending: Vec<usize> = (0..n).filter(|&i| answers[i].is_none()).collect();
        let Some(next) = pending.iter().map(|&i| deadline(i)).min() else {
            break;
        };
        let now = Instant::now();
        if now >= next {
            for &i in &pending {
                if deadline(i) <= now {
                    answers[i] = Some(Err(HookStatus::TimedOut {
                        after_ms: millis(group.hooks[i].1),
                    }));
                }
            }
            continue;
        }
        match rx.recv_timeout(next - now) {
            Ok((i, answer)) => {
                if answers[i].is_none() {
                    answers[i] = Some(if Instant::now() > deadline(i) {
                        Err(HookStatus::TimedOut {
                            after_ms: millis(group.hooks[i].1),
                        })
                    } else {
                        answer
                    });
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                // Every thread ended; one that sent nothing died outside the caught call.
                for &i in &pending {
                    if answers[i].is_none() {
                        answers[i] = Some(Err(HookStatus::Failed {
                            error: "its thread ended without an answer".into(),
                        }));
                    }
                }
            }
        }
    }
    answers
        .into_iter()
        .map(|a| {
            a.unwrap_or(Err(HookStatus::Failed {
                error: "no answer".into(),
            }))
        })
        .collect()
}
