//! Loom's exceptions in Python, and the one mapping of each Rust error to them: a session
//! engine's failure by its normalised kind, the store's by what it says of the input.

use loom_session::{ErrorKind, SessionError};
use loom_store::StoreError;
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

create_exception!(
    _loom,
    LoomError,
    PyException,
    "Every error Loom raises. `record`, `field` and `reason` say what was refused and why \
     (None when they do not apply)."
);
create_exception!(
    _loom,
    InvalidInput,
    LoomError,
    "Bad input: nothing was stored or changed."
);
create_exception!(
    _loom,
    InvalidEvent,
    InvalidInput,
    "An event that breaks the log's rules (an orphan result, a duplicate call id): nothing of \
     its batch was stored."
);
create_exception!(
    _loom,
    NotFound,
    LoomError,
    "A session, model call, blob or alias that does not exist."
);
create_exception!(
    _loom,
    SessionNotFound,
    NotFound,
    "A session that does not exist."
);
create_exception!(
    _loom,
    Conflict,
    LoomError,
    "A write that conflicts with what is stored (a session that exists, a usage already \
     reported with other figures, another writer that moved the session on)."
);
create_exception!(
    _loom,
    Unavailable,
    LoomError,
    "The database cannot be reached or is busy: nothing was done; retry later."
);
create_exception!(
    _loom,
    StorageError,
    LoomError,
    "The store failed (I/O, a corrupt record, a schema newer than this build)."
);

/// A Python exception of the class for `kind`, with `record`, `field` and `reason` set.
pub(crate) fn raise<E: pyo3::PyTypeInfo>(
    message: String,
    record: Option<String>,
    field: Option<String>,
    reason: Option<String>,
) -> PyErr {
    let err = PyErr::new::<E, _>(message);
    Python::attach(|py| {
        let value = err.value(py);
        let _ = value.setattr("record", record);
        let _ = value.setattr("field", field);
        let _ = value.setattr("reason", reason);
    });
    err
}

pub(crate) fn store_error(e: StoreError) -> PyErr {
    let message = e.to_string();
    match e {
        StoreError::SessionNotFound(id) => raise::<SessionNotFound>(
            message,
            Some(format!("session {id}")),
            None,
            Some("not found".into()),
        ),
        StoreError::InvalidEvent {
            session,
            index,
            seq,
            source,
        } => raise::<InvalidEvent>(
            message,
            Some(format!(
                "session {session}, event {index} of the batch (seq {seq})"
            )),
            Some(format!("events[{index}]")),
            Some(source.to_string()),
        ),
        StoreError::InvalidRecord {
            session,
            record,
            reason,
        } => raise::<InvalidInput>(
            message,
            Some(format!("session {session}, {record}")),
            None,
            Some(reason),
        ),
        StoreError::Conflict {
            session,
            record,
            reason,
        } => raise::<Conflict>(
            message,
            Some(format!("session {session}, {record}")),
            None,
            Some(reason),
        ),
        StoreError::CallState { session, source } => raise::<InvalidInput>(
            message,
            Some(format!("session {session}")),
            None,
            Some(source.to_string()),
        ),
        StoreError::SessionExists(_) | StoreError::Moved { .. } => {
            raise::<Conflict>(message.clone(), None, None, Some(message))
        }
        StoreError::ModelCallNotFound { reason, .. } => {
            raise::<NotFound>(message, None, None, Some(reason))
        }
        StoreError::BlobNotFound(_) => raise::<NotFound>(message, None, None, None),
        StoreError::Unavailable { reason, .. } => {
            raise::<Unavailable>(message, None, None, Some(reason))
        }
        e if e.is_bad_input() => raise::<InvalidInput>(message, None, None, None),
        _ => raise::<StorageError>(message, None, None, None),
    }
}

/// The one place a session engine's failure becomes a Python exception, by its kind.
pub(crate) fn api_error(e: SessionError) -> PyErr {
    let reason = Some(e.message.clone());
    match e.kind {
        ErrorKind::Invalid => raise::<InvalidInput>(e.message, None, e.field, reason),
        ErrorKind::SessionNotFound => raise::<SessionNotFound>(e.message, None, e.field, reason),
        ErrorKind::NotFound => raise::<NotFound>(e.message, None, e.field, reason),
        ErrorKind::Conflict => raise::<Conflict>(e.message, None, e.field, reason),
        ErrorKind::Unavailable => raise::<Unavailable>(e.message, None, e.field, reason),
        _ => raise::<LoomError>(e.message, None, e.field, reason),
    }
}

pub(crate) fn import_error(e: loom_import::ImportError) -> PyErr {
    api_error(SessionError::from(e))
}

pub(crate) fn invalid(field: &str, reason: impl Into<String>) -> PyErr {
    let reason = reason.into();
    raise::<InvalidInput>(
        format!("{field}: {reason}"),
        None,
        Some(field.to_owned()),
        Some(reason),
    )
}
