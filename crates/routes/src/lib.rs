//! Which route a request takes, by host and path, with nginx's precedence (docs/routing.md).
//!
//! Pure: no I/O, no clock, no allocation per request. The proxy builds a [`Table`] from a
//! listener's routes at each (re)load and asks it, for each request, which route takes it
//! ([`Table::select`]); `fulcrum check` builds the same table to refuse what could never work
//! (a regex that does not compile, two routes that can never be told apart).
//!
//! * [`normalize`]: a request's path as nginx matches locations against it (`$uri`):
//!   percent-decoded, `.` and `..` segments resolved, slashes merged; a path that climbs above
//!   the root is invalid (nginx: 400).
//! * [`Table::select`]: the server by host (exact; the longest leading wildcard; the longest
//!   trailing wildcard; the first matching regex in file order; else the routes without
//!   `host`), then, among that server's routes, the location (exact; else the longest prefix,
//!   taken at once if `prefix_wins`; else the first matching regex in file order; else the
//!   longest prefix). Extra conditions (`methods`, `headers`, `query`) narrow the candidates;
//!   among equals, file order wins.

mod host;
pub use host::host_name;
mod normalize;
mod table;

pub use normalize::{Invalid, is_normal, normalize, split_target};
pub use table::{
    BuildError, BuildErrorKind, Headers, Host, PathMatch, Request, Selected, Spec, Table,
};
