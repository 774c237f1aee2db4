//! Replaying many trajectories on several threads.
//!
//! Trajectories are independent: each is replayed from its own events with its own compaction
//! state, so they can run side by side. Each thread has its own [`Replayer`] (and so its own count
//! cache); the runs come back in input order, whatever order the threads finish in, so every
//! figure and every emitted request is the same for any number of threads.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;

use loom_core::render::{Rendered, TokenMeter};
use loom_import::ParsedSession;
use loom_store::BlobStore;

use crate::run::{ReplayError, ReplayOptions, Replayer, TraceRun};

/// One trajectory to replay and the source it is reported under.
#[derive(Debug, Clone, Copy)]
pub struct Job<'s> {
    /// The source (the trace file's name).
    pub source: &'s str,
    /// The trajectory.
    pub session: &'s ParsedSession,
}

/// Writes what a trajectory's call emits (e.g. its request as one JSONL line) into that
/// trajectory's buffer: `(session, call, Loom's request, buffer)`.
pub type EmitFn<'f> =
    dyn Fn(&ParsedSession, usize, &Rendered, &mut Vec<u8>) -> std::io::Result<()> + Sync + 'f;

/// Why a parallel replay stopped.
#[derive(Debug, thiserror::Error)]
pub enum ParallelError<E> {
    /// A trajectory could not be replayed.
    #[error(transparent)]
    Replay(#[from] ReplayError),
    /// The emit function failed for a trajectory.
    #[error("trajectory `{trace}`: {source}")]
    Emit {
        /// The trajectory.
        trace: String,
        /// The error the emit function returned.
        #[source]
        source: std::io::Error,
    },
    /// `done` refused a run.
    #[error(transparent)]
    Done(E),
}

/// Replays `jobs` on `threads` threads (at least one) and hands each run to `done` in input
/// order, with the bytes `emit` wrote for its calls. Stops at the first trajectory (in input
/// order) that fails, or the first run `done` refuses; the runs before it have been handed over.
pub fn replay_parallel<M, E>(
    opts: &ReplayOptions,
    meter: &M,
    blobs: &dyn BlobStore,
    jobs: &[Job<'_>],
    threads: usize,
    emit: Option<&EmitFn<'_>>,
    done: &mut dyn FnMut(usize, TraceRun, Vec<u8>) -> Result<(), E>,
) -> Result<(), ParallelError<E>>
where
    M: TokenMeter + Sync,
    E: Send,
{
    let threads = threads.clamp(1, jobs.len().max(1));
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let (tx, rx) = mpsc::channel::<(usize, Outcome<E>)>();
        for _ in 0..threads {
            let tx = tx.clone();
            let (next, stop) = (&next, &stop);
            scope.spawn(move || {
                let replayer = Replayer::new(opts.clone(), meter, blobs);
                while !stop.load(Ordering::Relaxed) {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(job) = jobs.get(i) else { break };
                    let outcome = one(&replayer, job, emit);
                    if tx.send((i, outcome)).is_err() {
                        break;
                    }
                }
            });
        }
        drop(tx);
        // Runs that finished ahead of an earlier one wait here for their turn.
        let mut waiting: BTreeMap<usize, Outcome<E>> = BTreeMap::new();
        let mut turn = 0;
        for (i, outcome) in rx {
            waiting.insert(i, outcome);
            while let Some(outcome) = waiting.remove(&turn) {
                let handed = outcome
                    .and_then(|(run, bytes)| done(turn, run, bytes).map_err(ParallelError::Done));
                if let Err(e) = handed {
                    stop.store(true, Ordering::Relaxed);
                    return Err(e);
                }
                turn += 1;
            }
        }
        Ok(())
    })
}

/// A trajectory's run and the bytes emitted for it, or why it stopped.
type Outcome<E> = Result<(TraceRun, Vec<u8>), ParallelError<E>>;

/// Replays one trajectory, collecting what `emit` writes.
fn one<E>(replayer: &Replayer<'_>, job: &Job<'_>, emit: Option<&EmitFn<'_>>) -> Outcome<E> {
    let mut bytes = Vec::new();
    let mut failed: Option<std::io::Error> = None;
    let run = replayer.run(job.session, job.source, &mut |call, rendered| {
        if let (Some(emit), None) = (emit, &failed) {
            if let Err(e) = emit(job.session, call, rendered, &mut bytes) {
                failed = Some(e);
            }
        }
    })?;
    match failed {
        Some(source) => Err(ParallelError::Emit {
            trace: job.session.id.as_str().to_owned(),
            source,
        }),
        None => Ok((run, bytes)),
    }
}
