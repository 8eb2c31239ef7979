//! `fulcrum import`: an nginx configuration translated into fulcrum's (docs/import.md).
//!
//! * [`parse`]: nginx's syntax, includes expanded, each directive with its file and line.

pub mod parse;
