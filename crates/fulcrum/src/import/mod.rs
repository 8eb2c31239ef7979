//! `fulcrum import`: an nginx configuration translated into fulcrum's (docs/import.md).
//!
//! * [`parse`]: nginx's syntax, includes expanded, each directive with its file and line.
//! * [`translate`]: the `http` block as listeners, routes and upstreams; [`location`] its
//!   servers and locations, [`upstream`] its upstream blocks, [`values`] nginx's value
//!   syntaxes, [`notes`] what was left out.

pub mod location;
pub mod notes;
pub mod parse;
pub mod translate;
pub mod upstream;
pub mod values;
