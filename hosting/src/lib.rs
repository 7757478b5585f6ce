//! What running Lancet as a service for many tenants needs beyond keeping them apart:
//!
//! - [`audit`]: the audit record, sealed into a hash chain per writer ([`audit::Chain`]), and
//!   [`audit::verify`], which finds a removed, altered or reordered record.
//! - [`rate`]: a token bucket per tenant ([`rate::RateLimits`]) for requests per second.
//! - [`usage`]: per-tenant counters of what was used ([`usage::Usage`]), taken for storing.
//! - [`storage`]: per-tenant storage totals with reservations ([`storage::Ledger`]), so that
//!   concurrent writers cannot together pass a quota that each alone respects.
//!
//! This crate knows neither HTTP nor lance: the server stores audit records in a Lance table,
//! measures a tenant's bytes and maps refusals to its error shapes.

#![warn(missing_docs)]

pub mod audit;
pub mod rate;
pub mod storage;
pub mod usage;
