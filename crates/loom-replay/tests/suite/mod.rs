//! One file per topic.

mod openapi;
