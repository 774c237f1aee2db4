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

use super::db::{backend, corrupt, is_disconnect, Db};
use super::pool::{Conn, Pool, Pooled};
use super::tx;
use crate::blob::info_from;
use crate::{BlobInfo, BlobStore, Result, StoreError};

/// Bytes per stored chunk: large enough that a big output takes few round trips, small enough
/// that holding one chunk costs little.
const CHUNK: usize = 1024 * 1024;

/// How many times a call whose connection broke before it read any input or wrote any output
/// is run in all.
const ATTEMPTS: u32 = 3;

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

/// How storing a blob failed: before its commit was sent (the server rolled it back), or at the
/// commit, with the blob it was storing.
enum PutFailed {
    /// Before any input was read: the call can be run again as it is.
    Unread(StoreError),
    Before(StoreError),
    Commit(StoreError, Box<BlobInfo>),
}

/// Streams `reader` into chunks and names them by their hash, in one transaction on `conn`.
fn put_on(conn: &mut Conn, reader: &mut dyn Read) -> std::result::Result<BlobInfo, PutFailed> {
    let Conn {
        client,
        stmts,
        trips,
    } = conn;
    let mut tx = client
        .transaction()
        .map_err(|e| PutFailed::Unread(backend("starting to store a blob")(e)))?;
    trips.fetch_add(1, Ordering::Relaxed);
    let mut db = Db {
        client: &mut tx,
        stmts,
        trips,
    };
    let content: i64 = db
        .query_opt("SELECT nextval('blob_contents')", &[], "storing a blob")
        .and_then(|row| {
            row.map(|row| row.try_get(0))
                .transpose()
                .map_err(backend("storing a blob"))?
                .ok_or_else(|| corrupt("blobs", "the content sequence gave no value"))
        })
        .map_err(PutFailed::Unread)?;
    let stored = (|| {
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
        Ok((info, inserted == 1))
    })();
    let (info, new) = stored.map_err(PutFailed::Before)?;
    if !new {
        // The same bytes are already stored: this copy is rolled back with the transaction.
        return Ok(info);
    }
    trips.fetch_add(1, Ordering::Relaxed);
    match tx.commit() {
        Ok(()) => Ok(info),
        Err(e) => Err(PutFailed::Commit(
            backend("committing a blob")(e),
            Box::new(info),
        )),
    }
}

impl PgBlobStore {
    pub(super) fn new(pool: Arc<Pool>) -> Self {
        Self { pool }
    }

    /// What a store of a blob that got past reading its input comes to.
    fn put_ended(
        &self,
        conn: Pooled<'_>,
        outcome: std::result::Result<BlobInfo, PutFailed>,
    ) -> Result<BlobInfo> {
        const ACTION: &str = "storing a blob";
        match outcome {
            Ok(info) => Ok(info),
            Err(PutFailed::Unread(e) | PutFailed::Before(e)) => {
                drop(conn);
                Err(self.gone(ACTION, e))
            }
            Err(PutFailed::Commit(e, info)) => {
                conn.discard();
                if !is_disconnect(&e) {
                    return Err(e);
                }
                // Content-addressed: whether the lost commit was applied is whether the blob is
                // there now.
                let err = self.gone(ACTION, e);
                if self.contains(&info.blob)? {
                    return Ok(*info);
                }
                Err(err)
            }
        }
    }

    /// A broken connection is [`StoreError::Unavailable`] (and the pool's idle connections, most
    /// likely broken too, are dropped); any other error is returned as it is.
    fn gone(&self, action: &'static str, e: StoreError) -> StoreError {
        if !is_disconnect(&e) {
            return e;
        }
        self.pool.clear_idle();
        StoreError::Unavailable {
            action,
            reason: format!("the connection to PostgreSQL broke ({e})"),
        }
    }

    /// Finds the blob and checks every chunk against its hash.
    fn located_and_verified(&self, conn: &mut Conn, blob: &BlobRef) -> Result<Located> {
        let Conn {
            client,
            stmts,
            trips,
        } = conn;
        let mut db = Db {
            client,
            stmts,
            trips,
        };
        let at =
            locate(&mut db, blob)?.ok_or_else(|| StoreError::BlobNotFound(blob.to_string()))?;
        verify(&mut db, blob, &at)?;
        Ok(at)
    }
}

impl BlobStore for PgBlobStore {
    fn put(&self, bytes: &[u8]) -> Result<BlobInfo> {
        if bytes.len() > CHUNK {
            let mut reader = bytes;
            return self.put_reader(&mut reader);
        }
        // One chunk, whose bytes and hash are known before anything is sent: one statement
        // (`loom_put_blob`), which writes nothing when the blob is already stored. Run again
        // after a broken connection it finds the blob stored, or stores it.
        let mut stats = StatsBuilder::new();
        stats.update(bytes);
        let info = info_from(stats.finish())?;
        let len = i64::try_from(bytes.len()).map_err(|_| corrupt("blobs", "a blob's size"))?;
        tx::statement(&self.pool, "storing a blob", |db| {
            db.query_opt(
                "SELECT loom_put_blob($1, $2, $3)",
                &[&info.blob.hex(), &bytes, &len],
                "storing a blob",
            )
        })?;
        Ok(info)
    }

    fn put_reader(&self, reader: &mut dyn Read) -> Result<BlobInfo> {
        const ACTION: &str = "storing a blob";
        let mut attempt = 1;
        loop {
            let mut conn = self.pool.get(ACTION)?;
            match put_on(&mut conn, reader) {
                Err(PutFailed::Unread(e)) if is_disconnect(&e) && attempt < ATTEMPTS => {
                    drop(conn);
                    self.pool.clear_idle();
                    attempt += 1;
                }
                Err(PutFailed::Unread(e)) => {
                    drop(conn);
                    return Err(self.gone(ACTION, e));
                }
                outcome => return self.put_ended(conn, outcome),
            }
        }
    }

    fn copy_to(&self, blob: &BlobRef, out: &mut dyn Write) -> Result<u64> {
        const ACTION: &str = "reading a blob";
        // Two passes: verify first, so that corrupt bytes never reach `out`. Until the second
        // pass starts nothing is written, so a broken connection is simply tried again.
        let mut attempt = 1;
        let (mut conn, at) = loop {
            let mut conn = self.pool.get(ACTION)?;
            match self.located_and_verified(&mut conn, blob) {
                Ok(at) => break (conn, at),
                Err(e) if is_disconnect(&e) && attempt < ATTEMPTS => {
                    drop(conn);
                    self.pool.clear_idle();
                    attempt += 1;
                }
                Err(e) => {
                    drop(conn);
                    return Err(self.gone(ACTION, e));
                }
            }
        };
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
        let mut hasher = Sha256::new();
        let mut written: u64 = 0;
        let streamed = for_each_chunk(&mut db, blob, &at, |data| {
            hasher.update(data);
            out.write_all(data).map_err(|source| StoreError::Io {
                action: "writing blob",
                path: PathBuf::from("<output>"),
                source,
            })?;
            written += data.len() as u64;
            Ok(())
        });
        drop(conn);
        streamed.map_err(|e| self.gone(ACTION, e))?;
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
        const ACTION: &str = "looking up a blob";
        let mut attempt = 1;
        loop {
            let mut conn = self.pool.get(ACTION)?;
            let Conn {
                client,
                stmts,
                trips,
            } = &mut *conn;
            let found = locate(
                &mut Db {
                    client,
                    stmts,
                    trips,
                },
                blob,
            );
            drop(conn);
            match found {
                Ok(found) => return Ok(found.is_some()),
                Err(e) if is_disconnect(&e) && attempt < ATTEMPTS => {
                    self.pool.clear_idle();
                    attempt += 1;
                }
                Err(e) => return Err(self.gone(ACTION, e)),
            }
        }
    }
}

crate::blob::sink_of_store!(PgBlobStore);
