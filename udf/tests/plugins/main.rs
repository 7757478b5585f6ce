//! Integration tests that run the real plugin modules (built from plugins/) in the runtime.

mod common;
mod definition;
mod examples;
mod hostile;
