//! Request checks.
