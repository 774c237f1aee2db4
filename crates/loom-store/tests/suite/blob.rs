//! The blob conformance suite (every scenario against every blob backend, by one macro), and the
//! file-system backend's own checks: corruption on disk, symlinks, escapes.

use std::collections::BTreeSet;
use std::io::{self, Read};

use loom_core::{BlobRef, ContentType};
use loom_store::{parse_blob_ref, BlobStore, StoreError};
use sha2::{Digest, Sha256};

use crate::suite::support::{BlobHarness, FsBlobHarness, MemoryBlobHarness, PgBlobHarness};

/// A reader that makes `len` bytes of text lines on the fly, so a test can stream 100 MB without
/// holding 100 MB: it cycles through a block of pseudo-random lines.
#[derive(Debug)]
struct Lines {
    block: Vec<u8>,
    pos: usize,
    remaining: u64,
}

impl Lines {
    /// Every line is this long, its newline included.
    const WIDTH: usize = 100;
    /// Lines in the repeated block: prime, so the block never lines up with a read buffer.
    const BLOCK_LINES: usize = 97;

    fn new(len: u64, seed: u64) -> Self {
        let mut state = seed | 1;
        let mut block = Vec::with_capacity(Self::WIDTH * Self::BLOCK_LINES);
        for _ in 0..Self::BLOCK_LINES {
            for _ in 1..Self::WIDTH {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1);
                block.push(b'!' + (state >> 58) as u8);
            }
            block.push(b'\n');
        }
        Self {
            block,
            pos: 0,
            remaining: len,
        }
    }
}

impl Read for Lines {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = buf
            .len()
            .min(self.block.len() - self.pos)
            .min(usize::try_from(self.remaining).unwrap_or(usize::MAX));
        buf[..n].copy_from_slice(&self.block[self.pos..self.pos + n]);
        self.pos = (self.pos + n) % self.block.len();
        self.remaining -= n as u64;
        Ok(n)
    }
}

pub(crate) fn round_trip<H: BlobHarness>(h: &H) {
    let blobs = h.blobs();
    for bytes in [
        &b""[..],
        b"hello\nworld",
        &[0u8, 159, 146, 150, 255],
        &vec![b'x'; 200_000],
    ] {
        let info = blobs.put(bytes).unwrap();
        assert_eq!(info.blob.hex(), hex::encode(Sha256::digest(bytes)));
        assert_eq!(info.stats.bytes, bytes.len() as u64);
        assert!(blobs.contains(&info.blob).unwrap());
        assert_eq!(blobs.get(&info.blob).unwrap(), bytes);
        let mut out = Vec::new();
        assert_eq!(
            blobs.copy_to(&info.blob, &mut out).unwrap(),
            bytes.len() as u64
        );
        assert_eq!(out, bytes);
    }
}

pub(crate) fn identical_bytes_are_stored_once<H: BlobHarness>(h: &H) {
    let blobs = h.blobs();
    let first = blobs.put(b"same bytes").unwrap();
    let second = blobs.put_reader(&mut &b"same bytes"[..]).unwrap();
    assert_eq!(first, second);
    let other = blobs.put(b"other bytes").unwrap();
    assert_ne!(other.blob, first.blob);
    assert_eq!(blobs.get(&first.blob).unwrap(), b"same bytes");
}

pub(crate) fn missing_blob_is_not_found<H: BlobHarness>(h: &H) {
    let blobs = h.blobs();
    let absent = BlobRef::from_hex(&"ab".repeat(32)).unwrap();
    assert!(!blobs.contains(&absent).unwrap());
    let err = blobs.get(&absent).unwrap_err();
    assert!(
        matches!(&err, StoreError::BlobNotFound(r) if r == &absent.to_string()),
        "{err}"
    );
    assert!(err.is_bad_input());
}

pub(crate) fn hundred_megabytes_stream<H: BlobHarness>(h: &H) {
    const LEN: u64 = 100 * 1024 * 1024;
    let blobs = h.blobs();
    let info = blobs.put_reader(&mut Lines::new(LEN, 7)).unwrap();

    // The expected hash comes from a second pass over the generator, without the store's code.
    let mut hasher = Sha256::new();
    io::copy(&mut Lines::new(LEN, 7), &mut HashingSink(&mut hasher)).unwrap();
    let sha256 = hex::encode(hasher.finalize());
    assert_eq!(info.stats.bytes, LEN);
    assert_eq!(LEN % Lines::WIDTH as u64, 0, "the text ends with a newline");
    assert_eq!(info.stats.lines, LEN / Lines::WIDTH as u64);
    assert_eq!(info.stats.sha256, sha256);
    assert_eq!(info.blob.hex(), sha256);
    assert_eq!(info.stats.content_type, ContentType::Text);

    let mut hasher = Sha256::new();
    assert_eq!(
        blobs
            .copy_to(&info.blob, &mut HashingSink(&mut hasher))
            .unwrap(),
        LEN
    );
    assert_eq!(
        hex::encode(hasher.finalize()),
        sha256,
        "the bytes read back differ"
    );
}

/// Hashes what is written to it, so that checking a large blob holds none of it.
struct HashingSink<'a>(&'a mut Sha256);

impl io::Write for HashingSink<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

pub(crate) fn path_like_references_are_refused<H: BlobHarness>(_h: &H) {
    for bad in [
        "../../etc/passwd",
        "/etc/passwd",
        "sha256:../x",
        "blobs/ab/abab",
        &format!("sha256:{}", "AB".repeat(32)),
        &format!("{}/..", "ab".repeat(32)),
    ] {
        let err = parse_blob_ref(bad).unwrap_err();
        assert!(
            matches!(err, StoreError::UnsafeReference { .. }),
            "{bad}: {err}"
        );
    }
}

/// Calls `$callback!($args; <every blob scenario>)`.
macro_rules! with_blob_scenarios {
    ($callback:ident ! ( $($args:tt)* )) => {
        $callback! { $($args)* ;
            round_trip,
            identical_bytes_are_stored_once,
            missing_blob_is_not_found,
            hundred_megabytes_stream,
            path_like_references_are_refused,
        }
    };
}

macro_rules! blob_backend {
    ($backend:ident, $harness:ty ; $($scenario:ident),* $(,)?) => {
        mod $backend {
            use super::*;

            $(
                #[test]
                fn $scenario() {
                    if let Some(harness) = <$harness as BlobHarness>::try_open() {
                        super::$scenario(&harness);
                    }
                }
            )*

            pub(super) const COVERED: &[&str] = &[$(stringify!($scenario)),*];
        }
    };
}

with_blob_scenarios!(blob_backend!(memory, MemoryBlobHarness));
with_blob_scenarios!(blob_backend!(fs, FsBlobHarness));
with_blob_scenarios!(blob_backend!(postgres, PgBlobHarness));

#[test]
fn no_blob_backend_skips_a_scenario() {
    let defined: BTreeSet<&str> = include_str!("blob.rs")
        .lines()
        .filter_map(|line| line.strip_prefix("pub(crate) fn "))
        .filter_map(|rest| rest.split('<').next())
        .collect();
    assert!(defined.len() >= 5, "found only {defined:?}");
    for (backend, list) in [
        ("memory", memory::COVERED),
        ("fs", fs::COVERED),
        ("postgres", postgres::COVERED),
    ] {
        let covered: BTreeSet<&str> = list.iter().copied().collect();
        assert_eq!(
            covered.len(),
            list.len(),
            "{backend} lists a scenario twice"
        );
        assert_eq!(
            covered, defined,
            "{backend} does not run exactly the defined scenarios"
        );
    }
}

// The file-system backend's own checks: they reach behind the trait to the files on disk.

fn blob_file(h: &FsBlobHarness, blob: &BlobRef) -> std::path::PathBuf {
    let hex = blob.hex();
    h.blobs.root().join("blobs").join(&hex[..2]).join(hex)
}

#[test]
fn fs_corrupt_file_is_refused_and_nothing_is_written() {
    let h = FsBlobHarness::open();
    let info = h.blobs.put(b"original bytes").unwrap();
    let path = blob_file(&h, &info.blob);
    std::fs::write(&path, b"tampered bytes").unwrap();
    let mut out = Vec::new();
    let err = h.blobs.copy_to(&info.blob, &mut out).unwrap_err();
    match &err {
        StoreError::BlobCorrupt { reference, actual } => {
            assert_eq!(reference, &info.blob.to_string());
            assert_eq!(actual, &hex::encode(Sha256::digest(b"tampered bytes")));
        }
        other => panic!("expected BlobCorrupt, got {other:?}"),
    }
    assert!(
        !err.is_bad_input(),
        "corruption is the system's fault, not the caller's"
    );
    assert!(out.is_empty(), "corrupt bytes reached the output");
}

#[test]
fn fs_dedup_keeps_one_file() {
    let h = FsBlobHarness::open();
    for _ in 0..3 {
        h.blobs.put(b"same").unwrap();
    }
    let files: Vec<_> = walk(&h.blobs.root().join("blobs"));
    assert_eq!(files.len(), 1, "{files:?}");
    assert!(
        walk(&h.blobs.root().join("tmp")).is_empty(),
        "temporary files left behind"
    );
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

#[cfg(unix)]
#[test]
fn fs_symlinked_blob_is_refused() {
    let h = FsBlobHarness::open();
    let secret = h.dir.path().join("secret.txt");
    std::fs::write(&secret, b"outside the workspace").unwrap();
    let blob = BlobRef::from_hex(&hex::encode(Sha256::digest(b"outside the workspace"))).unwrap();
    let path = blob_file(&h, &blob);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(&secret, &path).unwrap();
    let mut out = Vec::new();
    let err = h.blobs.copy_to(&blob, &mut out).unwrap_err();
    assert!(matches!(err, StoreError::UnsafeReference { .. }), "{err}");
    assert!(out.is_empty());
}

#[cfg(unix)]
#[test]
fn fs_symlinked_folder_out_of_the_workspace_is_refused() {
    let h = FsBlobHarness::open();
    let bytes = b"planted outside";
    let blob = BlobRef::from_hex(&hex::encode(Sha256::digest(bytes))).unwrap();
    let outside = h.dir.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join(blob.hex()), bytes).unwrap();
    let shard = blob_file(&h, &blob).parent().unwrap().to_owned();
    let _ = std::fs::remove_dir(&shard);
    std::os::unix::fs::symlink(&outside, &shard).unwrap();
    let err = h.blobs.get(&blob).unwrap_err();
    assert!(matches!(err, StoreError::UnsafeReference { .. }), "{err}");
}
