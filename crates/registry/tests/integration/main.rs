//! The registry's integration tests, one module per area, in one test binary.

mod admission;
mod api_endpoints;
mod event_ttl;
mod events;
mod own_writes;
mod service_claims;
mod store;
