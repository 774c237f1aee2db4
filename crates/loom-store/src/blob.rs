//! The blob store: large and binary outputs, content-addressed by SHA-256.
//!
//! Every read re-hashes the bytes and refuses them if they no longer match their reference, so a
//! recovered output is the original or an error — never something else. Writes stream through a
//! hasher into a temporary file, so a 100 MB output is never held in memory.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Component, Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use loom_core::{BlobRef, ContentStats, StatsBuilder};
use sha2::{Digest, Sha256};

use crate::{Result, StoreError};

/// Read and write buffer size for streaming blobs.
const CHUNK: usize = 64 * 1024;

pub use loom_core::BlobInfo;

/// A human-readable name for a blob inside a session, like `outputs/search_001.json`.
///
/// Only relative paths of plain components are accepted: no `..`, no `.`, no absolute paths, no
/// empty components, and only `[A-Za-z0-9._-]` in names, so an alias can be written out as a file
/// under a workspace without ever leaving it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BlobAlias(String);

impl BlobAlias {
    /// Longest alias accepted, in bytes.
    const MAX_LEN: usize = 512;

    /// Validates an alias.
    pub fn new(alias: &str) -> Result<Self> {
        let refuse = |reason: &str| StoreError::UnsafeReference {
            reference: alias.to_owned(),
            reason: reason.to_owned(),
        };
        if alias.is_empty() {
            return Err(refuse("an alias must not be empty"));
        }
        if alias.len() > Self::MAX_LEN {
            return Err(refuse("an alias must be at most 512 bytes"));
        }
        if alias.starts_with('/') || alias.starts_with('\\') || Path::new(alias).is_absolute() {
            return Err(refuse("absolute paths are not allowed"));
        }
        for part in alias.split('/') {
            match part {
                "" => return Err(refuse("empty path components are not allowed")),
                "." | ".." => return Err(refuse("`.` and `..` components are not allowed")),
                _ => {}
            }
            if !part
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
            {
                return Err(refuse(
                    "only letters, digits, `.`, `_`, `-` and `/` are allowed",
                ));
            }
        }
        Ok(Self(alias.to_owned()))
    }

    /// The alias as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Parses a blob reference given by a user: `sha256:<hex>` or 64 bare hex digits.
///
/// Anything path-like is refused with [`StoreError::UnsafeReference`] rather than looked up.
pub fn parse_blob_ref(reference: &str) -> Result<BlobRef> {
    let hex = reference.strip_prefix("sha256:").unwrap_or(reference);
    BlobRef::from_hex(hex).map_err(|_| StoreError::UnsafeReference {
        reference: reference.to_owned(),
        reason: "not a `sha256:<64 lowercase hex digits>` reference".into(),
    })
}

/// Content-addressed storage for large and binary outputs.
///
/// Every blob store is also the sink `loom-import` offloads long outputs to
/// ([`loom_import::BlobSink`]), so a reader can be handed any store.
pub trait BlobStore: loom_import::BlobSink + Send + Sync + std::fmt::Debug {
    /// Stores everything `reader` yields; storing the same bytes twice stores them once.
    fn put_reader(&self, reader: &mut dyn Read) -> Result<BlobInfo>;

    /// Stores a byte string.
    fn put(&self, mut bytes: &[u8]) -> Result<BlobInfo> {
        self.put_reader(&mut bytes)
    }

    /// Writes the blob's bytes to `out`, after checking they still hash to `blob`.
    ///
    /// Returns the number of bytes written. Nothing is written when the check fails.
    fn copy_to(&self, blob: &BlobRef, out: &mut dyn Write) -> Result<u64>;

    /// The blob's bytes, checked against its hash.
    fn get(&self, blob: &BlobRef) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        self.copy_to(blob, &mut out)?;
        Ok(out)
    }

    /// Whether the blob is stored (without checking its bytes).
    fn contains(&self, blob: &BlobRef) -> Result<bool>;
}

fn corrupt(blob: &BlobRef, actual: String) -> StoreError {
    StoreError::BlobCorrupt {
        reference: blob.to_string(),
        actual,
    }
}

pub(crate) fn info_from(stats: ContentStats) -> Result<BlobInfo> {
    let blob = BlobRef::from_hex(&stats.sha256).map_err(|e| StoreError::Corrupt {
        table: "blobs",
        reason: e.to_string(),
    })?;
    Ok(BlobInfo { blob, stats })
}

/// Blobs in process memory.
#[derive(Debug, Default)]
pub struct MemoryBlobStore {
    blobs: Mutex<BTreeMap<BlobRef, Vec<u8>>>,
}

impl MemoryBlobStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }
}

impl BlobStore for MemoryBlobStore {
    fn put_reader(&self, reader: &mut dyn Read) -> Result<BlobInfo> {
        let mut bytes = Vec::new();
        reader
            .read_to_end(&mut bytes)
            .map_err(|source| StoreError::Io {
                action: "reading blob input",
                path: PathBuf::from("<memory>"),
                source,
            })?;
        let info = info_from(ContentStats::of(&bytes))?;
        self.blobs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(info.blob.clone())
            .or_insert(bytes);
        Ok(info)
    }

    fn copy_to(&self, blob: &BlobRef, out: &mut dyn Write) -> Result<u64> {
        let blobs = self.blobs.lock().unwrap_or_else(PoisonError::into_inner);
        let bytes = blobs
            .get(blob)
            .ok_or_else(|| StoreError::BlobNotFound(blob.to_string()))?;
        let actual = hex::encode(Sha256::digest(bytes));
        if actual != blob.hex() {
            return Err(corrupt(blob, actual));
        }
        out.write_all(bytes).map_err(|source| StoreError::Io {
            action: "writing blob",
            path: PathBuf::from("<output>"),
            source,
        })?;
        Ok(bytes.len() as u64)
    }

    fn contains(&self, blob: &BlobRef) -> Result<bool> {
        Ok(self
            .blobs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(blob))
    }
}

/// Blobs as files under a workspace folder: `blobs/<first two hex>/<hex>`.
#[derive(Debug)]
pub struct FsBlobStore {
    root: PathBuf,
}

impl FsBlobStore {
    /// Opens (creating if needed) the blob store under `workspace`.
    pub fn open(workspace: impl AsRef<Path>) -> Result<Self> {
        let workspace = workspace.as_ref();
        for dir in [workspace.join("blobs"), workspace.join("tmp")] {
            fs::create_dir_all(&dir).map_err(|source| StoreError::Io {
                action: "creating blob folder",
                path: dir.clone(),
                source,
            })?;
        }
        let root = workspace.canonicalize().map_err(|source| StoreError::Io {
            action: "resolving workspace",
            path: workspace.to_owned(),
            source,
        })?;
        Ok(Self { root })
    }

    /// The workspace folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn path_of(&self, blob: &BlobRef) -> PathBuf {
        let hex = blob.hex();
        self.root.join("blobs").join(&hex[..2]).join(hex)
    }

    /// Opens a blob file, refusing symlinks and anything that resolves outside the workspace.
    fn open_checked(&self, blob: &BlobRef) -> Result<File> {
        let path = self.path_of(blob);
        let meta = match fs::symlink_metadata(&path) {
            Ok(meta) => meta,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(StoreError::BlobNotFound(blob.to_string()))
            }
            Err(source) => {
                return Err(StoreError::Io {
                    action: "inspecting blob",
                    path,
                    source,
                })
            }
        };
        if meta.file_type().is_symlink() || !meta.is_file() {
            return Err(StoreError::UnsafeReference {
                reference: blob.to_string(),
                reason: "the blob's file is a symlink or not a regular file".into(),
            });
        }
        let real = path.canonicalize().map_err(|source| StoreError::Io {
            action: "resolving blob",
            path: path.clone(),
            source,
        })?;
        if !real.starts_with(&self.root) || real.components().any(|c| c == Component::ParentDir) {
            return Err(StoreError::UnsafeReference {
                reference: blob.to_string(),
                reason: "the blob resolves outside the workspace".into(),
            });
        }
        File::open(&real).map_err(|source| StoreError::Io {
            action: "opening blob",
            path: real,
            source,
        })
    }
}

fn io_err<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> StoreError + 'a {
    move |source| StoreError::Io {
        action,
        path: path.to_owned(),
        source,
    }
}

impl BlobStore for FsBlobStore {
    fn put_reader(&self, reader: &mut dyn Read) -> Result<BlobInfo> {
        let tmp_dir = self.root.join("tmp");
        let tmp_path = tmp_dir.join(format!(
            "put-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let mut tmp = File::create(&tmp_path).map_err(io_err("creating", &tmp_path))?;
        let mut stats = StatsBuilder::new();
        let mut buf = vec![0u8; CHUNK];
        let copied = (|| -> io::Result<()> {
            loop {
                let n = match reader.read(&mut buf) {
                    Ok(0) => return Ok(()),
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                };
                stats.update(&buf[..n]);
                tmp.write_all(&buf[..n])?;
            }
        })();
        if let Err(source) = copied.and_then(|()| tmp.sync_all()) {
            let _ = fs::remove_file(&tmp_path);
            return Err(StoreError::Io {
                action: "writing blob",
                path: tmp_path,
                source,
            });
        }
        drop(tmp);
        let info = info_from(stats.finish())?;
        let dest = self.path_of(&info.blob);
        if dest.exists() {
            let _ = fs::remove_file(&tmp_path);
            return Ok(info);
        }
        let dir = dest.parent().unwrap_or(&self.root).to_owned();
        fs::create_dir_all(&dir).map_err(io_err("creating blob folder", &dir))?;
        fs::rename(&tmp_path, &dest).map_err(io_err("moving blob into place", &dest))?;
        // The rename is only durable once the folder that holds it is synced.
        File::open(&dir)
            .and_then(|d| d.sync_all())
            .map_err(io_err("syncing blob folder", &dir))?;
        Ok(info)
    }

    fn put(&self, bytes: &[u8]) -> Result<BlobInfo> {
        // Bytes in memory are hashed first: bytes already stored (an agent re-reads a file,
        // re-runs a test) cost no file at all.
        let info = info_from(ContentStats::of(bytes))?;
        if self.path_of(&info.blob).exists() {
            return Ok(info);
        }
        self.put_reader(&mut &bytes[..])
    }

    fn copy_to(&self, blob: &BlobRef, out: &mut dyn Write) -> Result<u64> {
        // Two passes: verify first, so that corrupt bytes never reach `out`.
        let path = self.path_of(blob);
        let mut file = self.open_checked(blob)?;
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; CHUNK];
        loop {
            let n = file.read(&mut buf).map_err(io_err("reading blob", &path))?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
        }
        let actual = hex::encode(hasher.finalize());
        if actual != blob.hex() {
            return Err(corrupt(blob, actual));
        }
        let mut file = self.open_checked(blob)?;
        io::copy(&mut file, out).map_err(io_err("copying blob", &path))
    }

    fn contains(&self, blob: &BlobRef) -> Result<bool> {
        Ok(self.path_of(blob).is_file())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_refuse_escapes() {
        for bad in [
            "",
            "/etc/passwd",
            "../x",
            "a/../b",
            "a//b",
            "./a",
            "a b",
            "a\\b",
        ] {
            assert!(BlobAlias::new(bad).is_err(), "{bad:?} should be refused");
        }
        assert_eq!(
            BlobAlias::new("outputs/search_001.json").unwrap().as_str(),
            "outputs/search_001.json"
        );
    }

    #[test]
    fn parse_refuses_paths() {
        assert!(parse_blob_ref("../../etc/passwd").is_err());
        let hex = "ab".repeat(32);
        assert_eq!(parse_blob_ref(&hex).unwrap().hex(), hex);
        assert_eq!(parse_blob_ref(&format!("sha256:{hex}")).unwrap().hex(), hex);
    }
}

/// A store as `loom-import`'s sink: offloading is storing, fetching is reading back checked.
macro_rules! sink_of_store {
    ($($store:ty),*) => {$(
        impl loom_import::BlobSink for $store {
            fn offload_reader(
                &self,
                reader: &mut dyn std::io::Read,
            ) -> std::result::Result<BlobInfo, loom_import::SinkError> {
                BlobStore::put_reader(self, reader).map_err(Into::into)
            }

            fn fetch(
                &self,
                blob: &BlobRef,
            ) -> std::result::Result<Vec<u8>, loom_import::SinkError> {
                BlobStore::get(self, blob).map_err(Into::into)
            }
        }
    )*};
}
pub(crate) use sink_of_store;

sink_of_store!(MemoryBlobStore, FsBlobStore);
