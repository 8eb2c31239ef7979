//! `access`: nginx's `allow` / `deny` rules, on a listener or a route.

use super::report::Report;
use super::table::Table;

/// `access = ["allow 10.0.0.0/8", "deny all"]`, checked; `None` when absent.
pub(super) fn read(r: &mut Report<'_>, t: &Table<'_>) -> Option<proxy::access::AccessList> {
    t.value("access")?;
    let rules = t.strings(r, "access", ("a rule", "rules"), "allow 10.0.0.0/8");
    let texts: Vec<&str> = rules.iter().map(|(_, text)| *text.get_ref()).collect();
    match proxy::access::AccessList::parse(&texts) {
        Ok((list, trimmed)) => {
            for i in trimmed {
                let (key, text) = &rules[i];
                r.warn(
                    &text.span(),
                    format!(
                        "{key}: \"{}\": the address has bits set past its prefix; they are ignored, as nginx ignores them (\"low address bits are meaningless\")",
                        text.get_ref()
                    ),
                );
            }
            Some(list)
        }
        Err((i, why)) => {
            let (key, text) = &rules[i];
            r.error(text.span(), key, why);
            None
        }
    }
}
