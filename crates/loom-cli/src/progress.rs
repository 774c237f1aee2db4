//! Progress bars on stderr for long work.

use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A bar over `total` items, drawn on stderr only when stderr is a terminal (indicatif hides it
/// otherwise), redrawn at least once a second so a slow item still shows progress.
pub(crate) fn bar(total: u64, message: &'static str) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    if let Ok(style) =
        ProgressStyle::with_template("{msg:10} [{bar:30}] {pos}/{len} ({per_sec}, {eta})")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(message);
    bar.enable_steady_tick(Duration::from_secs(1));
    bar
}
