//! One module per area.

mod compact;
