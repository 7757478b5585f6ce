//! Implements the ABI (through the SDK) but exports no entry point at all.

pub use lancet_sdk::abi::ABI_VERSION;
