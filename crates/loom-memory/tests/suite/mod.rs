//! Scenarios: writing (dedup, supersession, forget), search (ranking, filters, budget),
//! embedders and hybrid search, and indexing from a stored log.

mod embed;
mod extract;
mod index;
mod kb;
mod local_model;
mod postgres;
mod search;
mod support;
mod tiers;
mod write;
