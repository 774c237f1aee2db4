mod api;
mod isolation;
mod openapi;
mod props;
mod proxy;
mod support;
