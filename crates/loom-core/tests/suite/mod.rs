//! One module per area.

mod compact;
mod render;
