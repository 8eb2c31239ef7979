//! nginx's `allow` / `deny` (ngx_http_access_module): an ordered list of rules on a listener
//! or a route, the first that matches the client's address decides; `403` when it denies; no
//! rule matches: allowed. An IPv4-mapped IPv6 client is matched as the IPv4 address it is when
//! the list has IPv4 rules (`all` among them), else by the IPv6 rules, as nginx does
//! (`ngx_http_access_handler`: `alcf->rules && IN6_IS_ADDR_V4MAPPED`); `all` matches every
//! client. A route's list, when it has one, replaces the
//! listener's (nginx's locations inherit their server's rules only when they have none).

use std::net::IpAddr;

use ipnet::IpNet;

/// The body of the answer to a denied request.
pub(crate) const FORBIDDEN: &str = "403 Forbidden\n";

/// One rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Rule {
    allow: bool,
    /// `None`: `all`.
    net: Option<IpNet>,
}

/// An ordered list of `allow` / `deny` rules.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AccessList {
    rules: Vec<Rule>,
    /// Whether any rule is for IPv4 clients (an IPv4 network, or `all`): nginx's `rules`.
    has_v4: bool,
}

impl AccessList {
    /// Parses rules written as nginx writes them: `allow ADDRESS`, `deny CIDR`, `deny all`.
    /// An address with bits set beyond its prefix is taken with them cleared (nginx: "low
    /// address bits are meaningless"), which the second value names so a caller can warn.
    /// `Err`: the rule's index and why.
    pub fn parse(rules: &[&str]) -> Result<(AccessList, Vec<usize>), (usize, String)> {
        let mut list = AccessList::default();
        let mut trimmed = Vec::new();
        for (i, text) in rules.iter().enumerate() {
            let mut words = text.split_whitespace();
            let allow = match words.next() {
                Some("allow") => true,
                Some("deny") => false,
                _ => {
                    return Err((
                        i,
                        format!(
                            "\"{text}\": a rule is \"allow ADDRESS\" or \"deny ADDRESS\" (an address, a CIDR such as 10.0.0.0/8, or all)"
                        ),
                    ));
                }
            };
            let (Some(what), None) = (words.next(), words.next()) else {
                return Err((
                    i,
                    format!(
                        "\"{text}\": one address, CIDR or `all` after {}",
                        if allow { "allow" } else { "deny" }
                    ),
                ));
            };
            let net = if what == "all" {
                None
            } else if let Ok(net) = what.parse::<IpNet>() {
                if net.trunc() != net {
                    trimmed.push(i);
                }
                Some(net.trunc())
            } else if let Ok(addr) = what.parse::<IpAddr>() {
                Some(IpNet::from(addr))
            } else {
                return Err((
                    i,
                    format!(
                        "\"{what}\" is not an address, a CIDR (10.0.0.0/8, 2001:db8::/32) or all"
                    ),
                ));
            };
            list.has_v4 |= net.is_none_or(|n| matches!(n, IpNet::V4(_)));
            list.rules.push(Rule { allow, net });
        }
        Ok((list, trimmed))
    }

    /// Whether `client` may pass: the first rule that matches decides; none: allowed.
    pub fn allows(&self, client: IpAddr) -> bool {
        let client = match client {
            IpAddr::V6(v6) if self.has_v4 => v6.to_ipv4_mapped().map_or(client, IpAddr::V4),
            other => other,
        };
        self.rules
            .iter()
            .find(|r| r.net.is_none_or(|net| net.contains(&client)))
            .is_none_or(|r| r.allow)
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(rules: &[&str]) -> AccessList {
        AccessList::parse(rules).unwrap().0
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn the_first_match_wins_and_none_allows() {
        let l = list(&["allow 10.0.0.0/8", "deny 10.5.0.0/16", "deny all"]);
        assert!(l.allows(ip("10.5.1.1")), "allowed by the first rule");
        assert!(!l.allows(ip("192.168.1.1")));
        assert!(!l.allows(ip("2001:db8::1")), "all covers IPv6 too");
        let l = list(&["deny 10.5.0.0/16", "allow 10.0.0.0/8"]);
        assert!(!l.allows(ip("10.5.1.1")));
        assert!(l.allows(ip("10.6.1.1")));
        assert!(l.allows(ip("192.168.1.1")), "no rule matches: allowed");
        assert!(AccessList::default().allows(ip("1.2.3.4")));
    }

    #[test]
    fn ipv6_rules_and_mapped_clients() {
        let l = list(&["allow 2001:db8::/32", "deny 127.0.0.2", "deny ::1"]);
        assert!(l.allows(ip("2001:db8:1::5")));
        assert!(
            !l.allows(ip("::ffff:127.0.0.2")),
            "a mapped client is its IPv4 address"
        );
        assert!(!l.allows(ip("::1")));
        assert!(l.allows(ip("127.0.0.1")));
        // With no IPv4 rule (nor `all`), nginx matches a mapped client by the IPv6 rules.
        let v6 = list(&["deny ::ffff:10.0.0.0/104"]);
        assert!(!v6.allows(ip("::ffff:10.1.2.3")));
        assert!(v6.allows(ip("::ffff:11.1.2.3")));
        // With one, as its IPv4 address: the IPv6 form of the rule then matches nothing.
        let both = list(&["deny ::ffff:10.0.0.0/104", "allow 192.168.0.0/16"]);
        assert!(both.allows(ip("::ffff:10.1.2.3")));
    }

    #[test]
    fn what_is_refused_and_what_is_trimmed() {
        assert!(AccessList::parse(&["permit 10.0.0.0/8"]).is_err());
        assert!(AccessList::parse(&["allow"]).is_err());
        assert!(AccessList::parse(&["allow 10.0.0.0/8 extra"]).is_err());
        assert_eq!(AccessList::parse(&["deny 10.0.0.0/33"]).unwrap_err().0, 0);
        assert_eq!(
            AccessList::parse(&["allow all", "deny nowhere"])
                .unwrap_err()
                .0,
            1
        );
        let (l, trimmed) = AccessList::parse(&["deny 10.1.2.3/8"]).unwrap();
        assert_eq!(trimmed, [0]);
        assert!(!l.allows(ip("10.200.0.1")));
    }
}
