//! Blobs in PostgreSQL, so that servers sharing a database keep nothing on their own disks.
//!
//! A blob is stored in chunks (rows of `blob_chunks`) as it is read, so a 100 MB output is never
//! held in memory; its hash is only known at the end, so the chunks go under a fresh content id,
//! and the blob exists once its `blobs` row commits in the same transaction. Storing bytes that
//! are already there rolls the copy back. Reads check the hash over every chunk before writing a
//! byte out, then stream the chunks out, checking again as they go.

use std::io::{self, Read, Write};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use loom_core::{BlobRef, StatsBuilder};
use postgres::GenericClient;
use sha2::{Digest, Sha256};

use super::db::{backend, corrupt, Db};
use super::pool::{Conn, Pool};
use crate::blob::info_from;
use crate::{BlobInfo, BlobStore, Result, StoreError};

/// Bytes per stored chunk: large enough that a big output takes few round trips, small enough
/// that holding one chunk costs little.
const CHUNK: usize = 1024 * 1024;

/// Content-addressed blobs in the database of a [`PgStore`](super::PgStore).
#[derive(Debug, Clone)]
pub struct PgBlobStore {
    pool: Arc<Pool>,
}

/// Where a stored blob's chunks are.
struct Located {
    content: i64,
    bytes: i64,
    chunks: i64,
}

impl PgBlobStore {
    pub(super) fn new(pool: Arc<Pool>) -> Self {
        Self { pool }
    }
}

/// Fills `buf` from `reader` as far as it goes; fewer bytes than its length means the end.
fn fill(reader: &mut dyn Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

fn locate(db: &mut Db<'_, impl GenericClient>, blob: &BlobRef) -> Result<Option<Located>> {
    const ACTION: &str = "looking up a blob";
    db.query_opt(
        "SELECT content, bytes, chunks FROM blobs WHERE sha256 = $1",
        &[&blob.hex()],
        ACTION,
    )?
    .map(|row| {
        Ok(Located {
            content: row.try_get(0).map_err(backend(ACTION))?,
            bytes: row.try_get(1).map_err(backend(ACTION))?,
            chunks: row.try_get(2).map_err(backend(ACTION))?,
        })
    })
    .transpose()
}

/// Calls `each` with every chunk of the blob, in order, one at a time.
fn for_each_chunk(
    db: &mut Db<'_, impl GenericClient>,
    blob: &BlobRef,
    at: &Located,
    mut each: impl FnMut(&[u8]) -> Result<()>,
) -> Result<()> {
    const ACTION: &str = "reading a blob";
    for idx in 0..at.chunks {
        let row = db
            .query_opt(
                "SELECT data FROM blob_chunks WHERE content = $1 AND idx = $2",
                &[&at.content, &idx],
                ACTION,
            )?
            .ok_or_else(|| {
                corrupt(
                    "blob_chunks",
                    format!("blob `{blob}`: chunk {idx} of {} is missing", at.chunks),
                )
            })?;
        let data: &[u8] = row.try_get(0).map_err(backend(ACTION))?;
        each(data)?;
    }
    Ok(())
}

/// Hashes the blob's chunks and checks the hash and the length against what was stored.
fn verify(db: &mut Db<'_, impl GenericClient>, blob: &BlobRef, at: &Located) -> Result<()> {
    let mut hasher = Sha256::new();
    let mut total: u64 = 0;
    for_each_chunk(db, blob, at, |data| {
        hasher.update(data);
        total += data.len() as u64;
        Ok(())
    })?;
    let actual = hex::encode(hasher.finalize());
    if actual != blob.hex() {
        return Err(StoreError::BlobCorrupt {
            reference: blob.to_string(),
            actual,
        });
    }
    if i64::try_from(total).ok() != Some(at.bytes) {
        return Err(corrupt(
            "blobs",
            format!(
                "blob `{blob}`: {total} bytes are stored, its record says {}",
                at.bytes
            ),
        ));
    }
    Ok(())
}

impl BlobStore for PgBlobStore {
    fn put_reader(&self, reader: &mut dyn Read) -> Result<BlobInfo> {
        let mut conn = self.pool.get("storing a blob")?;
        let Conn {
            client,
            stmts,
            trips,
        } = &mut *conn;
        let mut tx = client
            .transaction()
            .map_err(backend("starting to store a blob"))?;
        trips.fetch_add(1, Ordering::Relaxed);
        let mut db = Db {
            client: &mut tx,
            stmts,
            trips,
        };
        let content: i64 = db
            .query_opt("SELECT nextval('blob_contents')", &[], "storing a blob")?
            .map(|row| row.try_get(0))
            .transpose()
            .map_err(backend("storing a blob"))?
            .ok_or_else(|| corrupt("blobs", "the content sequence gave no value"))?;
        let mut stats = StatsBuilder::new();
        let mut buf = vec![0u8; CHUNK];
        let mut chunks: i64 = 0;
        loop {
            let n = fill(reader, &mut buf).map_err(|source| StoreError::Io {
                action: "reading blob input",
                path: PathBuf::from("<input>"),
                source,
            })?;
            if n == 0 {
                break;
            }
            stats.update(&buf[..n]);
            db.execute(
                "INSERT INTO blob_chunks (content, idx, data) VALUES ($1, $2, $3)",
                &[&content, &chunks, &&buf[..n]],
                "storing a blob's bytes",
            )?;
            chunks += 1;
            if n < CHUNK {
                break;
            }
        }
        let info = info_from(stats.finish())?;
        let bytes = i64::try_from(info.stats.bytes)
            .map_err(|_| corrupt("blobs", "a blob over 2^63 bytes"))?;
        let inserted = db.execute(
            "INSERT INTO blobs (sha256, content, bytes, chunks) VALUES ($1, $2, $3, $4)
             ON CONFLICT (sha256) DO NOTHING",
            &[&info.blob.hex(), &content, &bytes, &chunks],
            "storing a blob",
        )?;
        if inserted == 0 {
            // The same bytes are already stored: this copy is rolled back with the transaction.
            return Ok(info);
        }
        trips.fetch_add(1, Ordering::Relaxed);
        tx.commit().map_err(backend("committing a blob"))?;
        Ok(info)
    }

    fn copy_to(&self, blob: &BlobRef, out: &mut dyn Write) -> Result<u64> {
        let mut conn = self.pool.get("reading a blob")?;
        let Conn {
            client,
            stmts,
            trips,
        } = &mut *conn;
        let mut db = Db {
            client,
            stmts,
            trips,
        };
        let at =
            locate(&mut db, blob)?.ok_or_else(|| StoreError::BlobNotFound(blob.to_string()))?;
        // Two passes: verify first, so that corrupt bytes never reach `out`.
        verify(&mut db, blob, &at)?;
        let mut hasher = Sha256::new();
        let mut written: u64 = 0;
        for_each_chunk(&mut db, blob, &at, |data| {
            hasher.update(data);
            out.write_all(data).map_err(|source| StoreError::Io {
                action: "writing blob",
                path: PathBuf::from("<output>"),
                source,
            })?;
            written += data.len() as u64;
            Ok(())
        })?;
        // Blobs are never rewritten, but a damaged disk may change bytes between the passes.
        let actual = hex::encode(hasher.finalize());
        if actual != blob.hex() {
            return Err(StoreError::BlobCorrupt {
                reference: blob.to_string(),
                actual,
            });
        }
        Ok(written)
    }

    fn contains(&self, blob: &BlobRef) -> Result<bool> {
        let mut conn = self.pool.get("looking up a blob")?;
        let Conn {
            client,
            stmts,
            trips,
        } = &mut *conn;
        Ok(locate(
            &mut Db {
                client,
                stmts,
                trips,
            },
            blob,
        )?
        .is_some())
    }
}
