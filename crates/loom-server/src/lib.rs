//! `loom serve`.
