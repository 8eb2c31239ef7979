//! `access_log_format` as a template of nginx's variables (`'$remote_addr "$request" $status'`),
//! compiled once when the configuration is read into a list of parts — literal bytes and
//! variables — that a line is written from in one pass.
//!
//! The syntax is nginx's `log_format` (`ngx_http_log_compile_format` in
//! src/http/modules/ngx_http_log_module.c): `$name` or `${name}`, a name being letters, digits
//! and `_`; everything else is copied as it is. Each variable is written as nginx writes it
//! (its meaning and formatting from ngx_http_log_module.c and src/http/ngx_http_variables.c):
//! values from the request escaped as nginx escapes them (`\xHH`), and `-` for one the request
//! does not have. Unlike nginx, an unknown variable is refused here with its place, since
//! fulcrum has no other variables to look it up in.

use std::fmt;

/// One variable of a template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Var {
    RemoteAddr,
    /// The user of an `Authorization: Basic` header (the index of `authorization` among the
    /// template's headers).
    RemoteUser(usize),
    TimeLocal,
    TimeIso8601,
    Msec,
    Request,
    RequestMethod,
    RequestUri,
    Uri,
    Args,
    ServerProtocol,
    Status,
    BodyBytesSent,
    BytesSent,
    RequestTime,
    UpstreamAddr,
    UpstreamStatus,
    UpstreamResponseTime,
    /// A request header, by its index among the template's headers.
    Http(usize),
    /// The host's name, from the `Host` header (its index among the template's headers).
    Host(usize),
    RequestId,
    Route,
    Fate,
    Upstream,
}

/// The variables a template may name, in the order `fulcrum check` lists them.
pub const VARIABLES: &[&str] = &[
    "remote_addr",
    "remote_user",
    "time_local",
    "time_iso8601",
    "msec",
    "request",
    "request_method",
    "request_uri",
    "uri",
    "args",
    "server_protocol",
    "status",
    "body_bytes_sent",
    "bytes_sent",
    "request_time",
    "upstream_addr",
    "upstream_status",
    "upstream_response_time",
    "http_NAME",
    "host",
    "request_id",
    "route",
    "fate",
    "upstream",
];

/// One part of a line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Part {
    Literal(Box<[u8]>),
    Var(Var),
}

/// A compiled `access_log_format` template.
#[derive(Debug, Clone)]
pub struct Template {
    /// As written in the configuration (two templates are the same if their texts are).
    source: String,
    pub(crate) parts: Vec<Part>,
    /// The request headers its variables read, lower case (`$http_x_real_ip`: `x-real-ip`),
    /// each once; a request's values are taken in this order when it comes.
    pub(crate) headers: Vec<Box<str>>,
}

impl PartialEq for Template {
    fn eq(&self, other: &Template) -> bool {
        self.source == other.source
    }
}

impl Eq for Template {}

/// Why a template was refused, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateError {
    /// The character (counted from 1) the problem starts at.
    pub at: usize,
    pub what: String,
}

impl fmt::Display for TemplateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at character {} of the template: {}", self.at, self.what)
    }
}

impl Template {
    /// Compiles `source`.
    pub fn parse(source: &str) -> Result<Template, TemplateError> {
        let mut template = Template {
            source: source.to_owned(),
            parts: Vec::new(),
            headers: Vec::new(),
        };
        let bytes = source.as_bytes();
        let mut literal = Vec::new();
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] != b'$' {
                literal.push(bytes[i]);
                i += 1;
                continue;
            }
            let (name, next) = variable_name(source, i)?;
            let var = template.variable(name).ok_or_else(|| TemplateError {
                at: char_at(source, i),
                what: format!(
                    "unknown variable \"${name}\"; known: ${}",
                    VARIABLES.join(", $")
                ),
            })?;
            if !literal.is_empty() {
                let text = std::mem::take(&mut literal).into_boxed_slice();
                template.parts.push(Part::Literal(text));
            }
            template.parts.push(Part::Var(var));
            i = next;
        }
        if !literal.is_empty() {
            template
                .parts
                .push(Part::Literal(literal.into_boxed_slice()));
        }
        Ok(template)
    }

    /// As written in the configuration.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The variable `name` means, `None` if it means none.
    fn variable(&mut self, name: &str) -> Option<Var> {
        Some(match name {
            "remote_addr" => Var::RemoteAddr,
            "remote_user" => Var::RemoteUser(self.header("authorization")),
            "time_local" => Var::TimeLocal,
            "time_iso8601" => Var::TimeIso8601,
            "msec" => Var::Msec,
            "request" => Var::Request,
            "request_method" => Var::RequestMethod,
            "request_uri" => Var::RequestUri,
            "uri" => Var::Uri,
            "args" => Var::Args,
            "server_protocol" => Var::ServerProtocol,
            "status" => Var::Status,
            "body_bytes_sent" => Var::BodyBytesSent,
            "bytes_sent" => Var::BytesSent,
            "request_time" => Var::RequestTime,
            "upstream_addr" => Var::UpstreamAddr,
            "upstream_status" => Var::UpstreamStatus,
            "upstream_response_time" => Var::UpstreamResponseTime,
            "host" => Var::Host(self.header("host")),
            "request_id" => Var::RequestId,
            "route" => Var::Route,
            "fate" => Var::Fate,
            "upstream" => Var::Upstream,
            _ => {
                // nginx's `$http_NAME`: the header's name in lower case, `_` for `-`.
                let header = name.strip_prefix("http_").filter(|h| !h.is_empty())?;
                let header = header.to_ascii_lowercase().replace('_', "-");
                Var::Http(self.header(&header))
            }
        })
    }

    /// The index of header `name` (lower case) among those the template reads, added if new.
    fn header(&mut self, name: &str) -> usize {
        match self.headers.iter().position(|h| &**h == name) {
            Some(i) => i,
            None => {
                self.headers.push(name.into());
                self.headers.len() - 1
            }
        }
    }
}

/// The name of the variable whose `$` is at byte `at` of `source`, and the byte after it.
fn variable_name(source: &str, at: usize) -> Result<(&str, usize), TemplateError> {
    let bytes = source.as_bytes();
    let braced = bytes.get(at + 1) == Some(&b'{');
    let start = at + 1 + usize::from(braced);
    let len = bytes[start.min(bytes.len())..]
        .iter()
        .take_while(|b| b.is_ascii_alphanumeric() || **b == b'_')
        .count();
    let end = start + len;
    let error = |what: &str| TemplateError {
        at: char_at(source, at),
        what: what.to_owned(),
    };
    if braced && bytes.get(end) != Some(&b'}') {
        return Err(error(
            "the closing \"}\" of \"${\" is missing (write ${name} or $name)",
        ));
    }
    if len == 0 {
        return Err(error(
            "\"$\" without a variable's name after it (a name is letters, digits and _)",
        ));
    }
    Ok((&source[start..end], end + usize::from(braced)))
}

/// The character number (from 1) of byte `at` of `source`.
fn char_at(source: &str, at: usize) -> usize {
    source.char_indices().take_while(|(i, _)| *i < at).count() + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_template_is_literals_and_variables() {
        let t = Template::parse("$remote_addr - ${status}x \"$http_X_Real_IP\" $host$http_host")
            .unwrap();
        assert_eq!(
            t.parts,
            vec![
                Part::Var(Var::RemoteAddr),
                Part::Literal(b" - ".to_vec().into()),
                Part::Var(Var::Status),
                Part::Literal(b"x \"".to_vec().into()),
                Part::Var(Var::Http(0)),
                Part::Literal(b"\" ".to_vec().into()),
                Part::Var(Var::Host(1)),
                Part::Var(Var::Http(1)),
            ]
        );
        assert_eq!(
            t.headers,
            vec!["x-real-ip".into(), "host".into()] as Vec<Box<str>>
        );
        assert_eq!(Template::parse("plain").unwrap().parts.len(), 1);
    }

    #[test]
    fn every_listed_variable_is_known() {
        for name in VARIABLES {
            let name = name.replace("NAME", "x_y");
            assert!(Template::parse(&format!("${name}")).is_ok(), "{name}");
        }
    }

    #[test]
    fn a_bad_template_is_refused_with_its_place() {
        let e = Template::parse("$remote_addr é $nope x").unwrap_err();
        assert_eq!(e.at, 16);
        assert!(
            e.what
                .starts_with("unknown variable \"$nope\"; known: $remote_addr, $remote_user"),
            "{}",
            e.what
        );
        assert!(e.what.contains("$http_NAME"), "{}", e.what);
        let e = Template::parse("a ${status").unwrap_err();
        assert_eq!(e.at, 3);
        assert!(e.what.contains("closing"), "{}", e.what);
        for bad in ["a $", "a $ b", "$-", "${}"] {
            assert!(Template::parse(bad).is_err(), "{bad}");
        }
        assert!(Template::parse("$http_").is_err());
    }
}
