//! Helpers several test modules share.

pub mod front_proxy;
pub mod hold;
pub mod websocket;
