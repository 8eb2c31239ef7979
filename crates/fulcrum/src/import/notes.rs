//! What the translation could not carry over, and whether that changes behaviour.

use super::parse::Directive;

/// One directive left out (or carried over only in part), for stderr:
/// `FILE:LINE: DIRECTIVE: why (what fulcrum does instead)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    pub at: String,
    pub directive: String,
    pub why: String,
    /// `true` when leaving it out does not change which answer a request gets (logs, worker
    /// tuning, buffers, compression...); `false` makes `fulcrum import` exit 1.
    pub cosmetic: bool,
}

impl std::fmt::Display for Note {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = if self.cosmetic {
            "cosmetic"
        } else {
            "CHANGES BEHAVIOUR"
        };
        write!(f, "{}: {}: {} [{kind}]", self.at, self.directive, self.why)
    }
}

/// The notes gathered while translating.
#[derive(Debug, Default)]
pub struct Notes(pub Vec<Note>);

impl Notes {
    pub fn cosmetic(&mut self, d: &Directive, why: impl Into<String>) {
        self.push(d, why, true);
    }

    pub fn behaviour(&mut self, d: &Directive, why: impl Into<String>) {
        self.push(d, why, false);
    }

    fn push(&mut self, d: &Directive, why: impl Into<String>, cosmetic: bool) {
        self.0.push(Note {
            at: d.at(),
            directive: d.name.clone(),
            why: why.into(),
            cosmetic,
        });
    }

    /// A directive the translation does not handle where it stands: cosmetic when it only
    /// tunes, logs or compresses ([`COSMETIC`]), else a change of behaviour.
    pub fn unhandled(&mut self, d: &Directive) {
        if is_cosmetic(&d.name) {
            self.cosmetic(
                d,
                "tuning, logging or encoding only (fulcrum has its own or none)",
            );
        } else {
            self.behaviour(
                d,
                "not translated (fulcrum has no equivalent: review by hand)",
            );
        }
    }
}

/// Directives whose absence changes no request's answer: worker and buffer tuning, logs, MIME
/// types, compression, TLS protocol tuning (fulcrum offers TLS 1.2 and 1.3 with its own
/// ciphers), caches of open files.
const COSMETIC: &[&str] = &[
    "user",
    "worker_processes",
    "worker_connections",
    "worker_rlimit_nofile",
    "worker_cpu_affinity",
    "pid",
    "daemon",
    "master_process",
    "events",
    "use",
    "multi_accept",
    "accept_mutex",
    "load_module",
    "pcre_jit",
    "thread_pool",
    "error_log",
    "access_log",
    "log_format",
    "log_not_found",
    "open_log_file_cache",
    "sendfile",
    "sendfile_max_chunk",
    "tcp_nopush",
    "tcp_nodelay",
    "aio",
    "directio",
    "output_buffers",
    "postpone_output",
    "types",
    "types_hash_max_size",
    "types_hash_bucket_size",
    "server_names_hash_max_size",
    "server_names_hash_bucket_size",
    "variables_hash_max_size",
    "variables_hash_bucket_size",
    "map_hash_bucket_size",
    "server_tokens",
    "charset",
    "source_charset",
    "gzip",
    "gzip_vary",
    "gzip_proxied",
    "gzip_comp_level",
    "gzip_buffers",
    "gzip_http_version",
    "gzip_types",
    "gzip_min_length",
    "gzip_disable",
    "ssl_protocols",
    "ssl_prefer_server_ciphers",
    "ssl_ciphers",
    "ssl_ecdh_curve",
    "ssl_dhparam",
    "ssl_session_cache",
    "ssl_session_timeout",
    "ssl_session_tickets",
    "ssl_stapling",
    "ssl_stapling_verify",
    "ssl_buffer_size",
    "proxy_http_version",
    "proxy_buffering",
    "proxy_buffers",
    "proxy_buffer_size",
    "proxy_busy_buffers_size",
    "proxy_request_buffering",
    "proxy_max_temp_file_size",
    "proxy_temp_path",
    "client_body_buffer_size",
    "client_body_temp_path",
    "client_header_buffer_size",
    "large_client_header_buffers",
    "keepalive_requests",
    "reset_timedout_connection",
    "lingering_close",
    "lingering_time",
    "lingering_timeout",
    "open_file_cache",
    "open_file_cache_valid",
    "open_file_cache_min_uses",
    "open_file_cache_errors",
    "resolver",
    "resolver_timeout",
    "zone",
    "http2_max_concurrent_streams",
    "http2_chunk_size",
    "index",
    "autoindex_exact_size",
    "etag",
    "msie_padding",
];

/// Whether leaving `name` out is cosmetic (see [`COSMETIC`]).
pub fn is_cosmetic(name: &str) -> bool {
    COSMETIC.contains(&name)
}
