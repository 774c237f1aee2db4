mod api;
mod isolation;
mod openapi;
mod postgres;
mod props;
mod proxy;
mod support;
