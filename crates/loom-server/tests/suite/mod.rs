mod api;
mod isolation;
mod memory;
mod openapi;
mod postgres;
mod props;
mod proxy;
mod support;
