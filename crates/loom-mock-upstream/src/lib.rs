//! A mock model provider.
