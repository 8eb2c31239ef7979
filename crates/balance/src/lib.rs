//! The balancing core of fulcrum: backends, their live statistics, and the algorithms that
//! choose among them.
//!
//! This crate does no I/O, reads no clock and draws from no global random source. Time comes in
//! as [`Nanos`] and every algorithm that needs randomness owns a generator seeded by its caller.
//! That is what lets the proxy, the lab and the simulator run exactly the same code, and what
//! lets a test replay a million picks with a fake clock (the approach sozu takes for its
//! protocol core).
//!
//! # Layout
//!
//! * [`backend`]: [`BackendId`], [`Nanos`], the per-backend configuration ([`BackendSpec`]) and
//!   live statistics ([`BackendState`]), and [`Backends`], the read-only view algorithms see.
//! * [`pool`]: [`Pool`], the one owner of per-backend statistics. `pick` hands out a [`Ticket`],
//!   `complete` consumes it and updates in-flight counts, latency and passive health (nginx's
//!   `max_fails`/`fail_timeout`), then tells the algorithm.
//! * [`balancer`]: the [`Balancer`] trait every algorithm implements, and [`PickCtx`], what it
//!   is told about a request.
//! * [`algorithm`]: [`Algorithm`], the list of algorithms by their configuration names, and
//!   their [`Options`].
//! * [`algorithms`]: one file per algorithm.
//! * [`retry`]: the retry-and-blame policy: what a failed attempt leads to (resend on a fresh
//!   connection, the next backend, or our own error) and whether the backend is blamed.
//! * [`attempt`]: [`Attempts`], a request's attempts as one state machine around the retry
//!   policy — the tried set, the attempt limit, resend-once, `response_timeout`, blame in the
//!   body and our own answer — driven alike by the proxy (HTTP and TCP) and the simulator.
//! * [`policy`]: [`Policy`], an upstream's balancing policy (algorithm, options, backends in
//!   pool order, attempt limit, queue, polling): what the proxy's settings make and the
//!   simulator's contenders hold.
//! * [`queue`]: the `max_conns` queue's decisions: whether a request may wait, and which
//!   waiting request a backend with room is handed to.
//! * [`ring`]: nginx's ketama ring, shared by `hash consistent` and `bounded_load`.
//! * [`smooth`]: nginx's smooth weighted round robin state, shared by the algorithms that use it
//!   to choose or to break ties.
//! * `smooth_index`, `load_index`, `tracking`: the O(log n) indexes behind the smooth round
//!   robins, the least-loaded algorithms and `fair` on large tiers (a kinetic tournament over
//!   load levels, a segment tree), and how they learn which backends changed; `reference`
//!   keeps the linear code they are tested against (docs/performance.md, issue 27).
//! * [`statuses`]: [`FailureStatuses`], the answers that count as failures for what the
//!   load-aware algorithms learn (`failure_statuses`).
//! * [`sticky`]: sticky sessions by cookie (HAProxy's `cookie insert indirect`): the opaque
//!   [`StickyId`] a cookie names a backend by, and the pick that prefers that backend while it
//!   can take the request ([`Pool::pick_preferred`]) and falls back to the algorithm.
//! * [`weights`]: the weight models, pure functions from backend load reports to the weights
//!   `dynamic_wrr`, `dwlc`, `capacity_weighted` and `utilization_wrr` balance by (seeds 001,
//!   003, 000 and gRFC A58; which algorithm has which model is [`Algorithm::weight_model`]).
//!
//! Algorithms read statistics through [`Backends`]; they never write them. Only [`Pool`] does.

pub mod algorithm;
pub mod algorithms;
pub mod attempt;
pub mod backend;
pub mod balancer;
pub mod budget;
mod load_index;
pub mod policy;
pub mod pool;
pub mod queue;
#[doc(hidden)]
pub mod reference;
pub mod retry;
pub mod ring;
pub mod smooth;
mod smooth_index;
pub mod statuses;
pub mod sticky;
mod tracking;
pub mod weights;

pub use algorithm::{
    Affinity, Algorithm, Implementation, Octets, OptionKey, Options, UnknownAlgorithm, WeightSource,
};
pub use algorithms::{PrequalOptions, RifLatency};
pub use attempt::{Attempts, BodyEnd, Next, Picked, Step};
pub use backend::{BackendId, BackendSpec, BackendState, Backends, Nanos, RAMP_FULL};
pub use balancer::{Balancer, Completion, Outcome, PickCtx, Probe, Verdict};
pub use budget::{RetryBudget, RetryBudgetSettings};
pub use policy::Policy;
pub use pool::{Pool, Ticket};
pub use retry::{
    Action, AttemptFailure, Blame, Connection, Decision, Fault, NextUpstream, Replay, RequestSent,
    ResponseReceived,
};
pub use statuses::FailureStatuses;
pub use sticky::{StickyId, StickyKey, StickyTable};
