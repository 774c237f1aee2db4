//! Scenarios: writing (dedup, supersession, forget), search (ranking, filters, budget) and
//! indexing from a stored log.

mod index;
mod kb;
mod postgres;
mod search;
mod support;
mod tiers;
mod write;
