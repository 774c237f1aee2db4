//! Tool results appended through the API: their stats must describe their content.
//!
//! A result's stats are what every observation and step says of the original output, so stats
//! that do not match the content would make the log lie. Inline outputs are checked by computing
//! their stats; an output already in the blob store must be there under the hash its stats
//! give. Under `--auth keys` a client cannot refer to blobs at all: content addresses are shared
//! by every tenant, and a reference could otherwise confirm what another tenant stored. Such a
//! client sends its output as text, and Loom offloads it.

use loom_core::{joined_text, ContentStats, EventBody, NewEvent, ToolOutput};
use loom_store::BlobStore;

use crate::error::{ApiError, Result};

/// Checks every tool result among `events`; `field` names the list (`events`).
pub(crate) fn check(
    events: &[NewEvent],
    field: &str,
    blobs: &dyn BlobStore,
    may_refer_to_blobs: bool,
) -> Result<()> {
    for (i, e) in events.iter().enumerate() {
        let EventBody::ToolResult { content, stats, .. } = &e.body else {
            continue;
        };
        let at = format!("{field}[{i}]");
        let expected = match content {
            ToolOutput::Text(text) => ContentStats::of(text.as_bytes()),
            ToolOutput::Parts(parts) => ContentStats::of(joined_text(parts).as_bytes()),
            ToolOutput::Blob(blob) => {
                if !may_refer_to_blobs {
                    return Err(ApiError::invalid_field(
                        format!("{at}.content.blob"),
                        format!(
                            "{at}: a shared server takes outputs as text (`content: {{\"text\": ...}}`) \
                             and stores large ones itself"
                        ),
                    ));
                }
                if stats.sha256 != blob.hex() {
                    return Err(ApiError::invalid_field(
                        format!("{at}.stats.sha256"),
                        format!(
                            "{at}: the stats name {} but the content is {blob}",
                            stats.sha256
                        ),
                    ));
                }
                if !blobs.contains(blob)? {
                    return Err(ApiError::invalid_field(
                        format!("{at}.content.blob"),
                        format!("{at}: {blob} is not in the blob store"),
                    ));
                }
                continue;
            }
        };
        if &expected != stats {
            return Err(ApiError::invalid_field(
                format!("{at}.stats"),
                format!(
                    "{at}: the stats do not describe the content; its stats are {}",
                    serde_json::to_string(&expected).unwrap_or_default()
                ),
            ));
        }
    }
    Ok(())
}
