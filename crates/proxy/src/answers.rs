//! Our own answers: what fulcrum says in place of a backend's answer, with the same status and
//! text to an HTTP/1.1 client and to an HTTP/2 stream, and the status the log gives a client
//! that left (TCP sessions included). In one place so the paths cannot drift apart.
//!
//! The request parser's own refusals (400, 414, 431, 501, 505) stay in `http1`, next to the
//! rules of RFC 9112 they enforce.

use balance::Fault;

use crate::http1::{Reject, reject};
use crate::upstream::Unpicked;

/// The status logged for a client that left before its answer (nginx's 499).
pub(crate) const CLIENT_CLOSED: u16 = 499;

/// Part of a request head came, the rest not within `client_header_timeout`.
pub(crate) const HEAD_TIMEOUT: Reject = reject(
    408,
    "408 Request Timeout: the request head did not arrive in time\n",
);
/// The body did not come within `client_body_timeout` (and `client_body_min_rate`).
pub(crate) const BODY_TIMEOUT: Reject = reject(
    408,
    "408 Request Timeout: the request body did not arrive in time\n",
);
/// The body, announced or received, exceeds `max_body_bytes`.
pub(crate) const TOO_LARGE: Reject = reject(
    413,
    "413 Content Too Large: the request body exceeds max_body_bytes\n",
);
/// The client closed its side before the whole body came.
pub(crate) const INCOMPLETE_BODY: Reject =
    reject(400, "400 Bad Request: incomplete request body\n");
/// A chunked body that breaks the chunked coding (RFC 9112 §7.1).
pub(crate) const BAD_CHUNKED: Reject =
    reject(400, "400 Bad Request: invalid chunked request body\n");
/// An HTTP/2 stream whose fields do not make a request head.
/// No route takes the request and the listener has no upstream of its own (nginx's 404 for a
/// URI no location matches).
pub(crate) const NOT_FOUND: Reject = reject(404, "404 Not Found: no route takes this request\n");

pub(crate) const MALFORMED: Reject = reject(400, "400 Bad Request: malformed request\n");
/// A request that HTTP/2 backends cannot be sent (its head cannot be written as HTTP/2 fields).
pub(crate) const UNCARRIED: Reject = reject(
    400,
    "400 Bad Request: the request cannot be written as HTTP/2 for the backend\n",
);

/// Our answer when every backend was full and the request could not wait.
pub(crate) fn no_room(why: Unpicked) -> Reject {
    match why {
        Unpicked::QueueTimeout => reject(
            503,
            "503 Service Unavailable: every backend is busy (max_conns) and the wait in the queue timed out\n",
        ),
        _ => reject(
            503,
            "503 Service Unavailable: every backend is busy (max_conns) and the queue is full\n",
        ),
    }
}

/// Our own answer, as [`balance::Attempts::own_answer`] chose it.
pub(crate) fn own((status, text): (u16, &'static str)) -> Reject {
    reject(status, text)
}

/// Our answer when no backend answered, by the last failure ([`balance::retry::own_answer`],
/// the rule the simulator applies too).
pub(crate) fn no_answer(last: Option<Fault>) -> Reject {
    let (status, text) = balance::retry::own_answer(last);
    reject(status, text)
}
