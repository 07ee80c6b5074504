//! The client library's integration tests, one module per area, in one test binary.

mod support;

mod config;
mod delegated;
mod events;
mod extension_authentication;
mod informer;
mod leaderelection;
mod request_header;
