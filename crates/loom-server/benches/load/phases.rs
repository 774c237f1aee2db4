//! Where a proxied call's time goes, timed from outside the server: the steps of the proxy's
//! preparation that are public functions, run here on the last body the latency scenario sent.
//! What the server's own overhead histogram shows beyond their sum is the rest of its work (the
//! sync with the log, the render, the receipt, the store's commits).

use std::time::Instant;

use anyhow::{Context, Result};
use loom_provider::{check_request, Api};
use loom_store::FsBlobStore;
use serde_json::Value;

/// Runs of each step; the median is reported.
const RUNS: usize = 5;

/// One step's name and its median time in milliseconds.
pub(crate) type Phase = (&'static str, f64);

/// Times the steps every proxied Chat call takes on `body`, whatever its mode.
pub(crate) fn time(body: &[u8]) -> Result<Vec<Phase>> {
    let dir = tempfile::Builder::new()
        .prefix("loom-load-phases-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .context("creating the blob folder")?;
    let blobs = FsBlobStore::open(dir.path()).context("opening the blob store")?;
    let value: Value = serde_json::from_slice(body).context("the body is not JSON")?;
    let parse = median(|| {
        let v: serde_json::Result<Value> = serde_json::from_slice(body);
        v.is_ok()
    });
    let check = median(|| check_request(Api::ChatCompletions, &value).is_ok());
    let mut opts = loom_import::ParseOptions::new(0);
    opts.format = loom_import::Format::OpenAi;
    let import = median(|| {
        loom_import::parse_slice("request", "request", body, &opts, &blobs)
            .is_ok_and(|s| !s.is_empty())
    });
    Ok(vec![
        ("JSON parse of the client's body", parse),
        ("request check (`check_request`)", check),
        ("history import (`parse_slice`)", import),
    ])
}

/// The median time of `f` in milliseconds; a run that reports failure counts as NaN, so it shows.
fn median(mut f: impl FnMut() -> bool) -> f64 {
    let mut times: Vec<f64> = (0..RUNS)
        .map(|_| {
            let t = Instant::now();
            let ok = f();
            if ok {
                t.elapsed().as_secs_f64() * 1e3
            } else {
                f64::NAN
            }
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[RUNS / 2]
}
