//! fulcrum's simulator (issue 13, first part): the `balance` crate's pools and algorithms —
//! the very code the proxy runs — driven in virtual time by a discrete-event loop, against
//! backends modelled as queueing servers.
//!
//! Built so far: the event queue ([`events`]), a FIFO multi-slot server ([`server`]) and
//! Mitzenmacher's supermarket model ([`supermarket`]) with its closed form, which validates
//! the loop against queueing theory. Not built yet: the lab's scenario files, many balancers,
//! load reports, retries, failures, reports (see issue 13).
//!
//! Pure and deterministic: no clock, no I/O; every random draw comes from the run's seed.

pub mod events;
pub mod server;
pub mod supermarket;
