mod api;
mod isolation;
mod props;
mod proxy;
mod support;
