mod api;
mod isolation;
mod proxy;
mod support;
