//! Where a reader puts the long outputs it offloads: a narrow trait that a store implements
//! (`loom-store`'s blob stores all do), so reading depends on no store.

use std::io::Read;

use loom_core::{BlobInfo, BlobRef};

/// A sink's own error, carried as it came (a store's error names what failed).
pub type SinkError = Box<dyn std::error::Error + Send + Sync>;

/// Content-addressed storage for the outputs a reader offloads, and reads back when a string
/// it spilled turns out not to be tool output.
pub trait BlobSink: Send + Sync + std::fmt::Debug {
    /// Stores everything `reader` yields; the same bytes twice are stored once.
    fn offload_reader(&self, reader: &mut dyn Read) -> Result<BlobInfo, SinkError>;

    /// Stores `bytes`.
    fn offload(&self, mut bytes: &[u8]) -> Result<BlobInfo, SinkError> {
        self.offload_reader(&mut bytes)
    }

    /// The bytes of a blob this sink stored, checked against its hash.
    fn fetch(&self, blob: &BlobRef) -> Result<Vec<u8>, SinkError>;
}
