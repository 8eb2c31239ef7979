//! Issue 29: `limit_conn` refuses as nginx's own does. Debian's nginx (`limit_conn_zone
//! $binary_remote_addr`, `limit_conn 2`) and fulcrum (`limit_conn = { max = 2 }`), each in
//! front of a backend of its own that holds every request until the test lets them go, get the
//! same requests in the same order from two client addresses: a client's third request while
//! two are held is refused (503), another client's is not, and once the held requests are
//! answered the client may send again.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use common::{HeldPort, Running, TempDir, TempFile, get_from};

/// A backend that holds each request until `open`, counting the requests it has read.
struct Gated {
    addr: SocketAddr,
    seen: Arc<AtomicUsize>,
}

type Gate = Arc<(Mutex<bool>, Condvar)>;

fn gated(gate: &Gate) -> Gated {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(AtomicUsize::new(0));
    let (counter, gate) = (Arc::clone(&seen), Arc::clone(gate));
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let (counter, gate) = (Arc::clone(&counter), Arc::clone(&gate));
            std::thread::spawn(move || serve(stream, &counter, &gate));
        }
    });
    Gated { addr, seen }
}

fn serve(mut stream: TcpStream, seen: &AtomicUsize, gate: &Gate) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            buf.drain(..end + 4);
            seen.fetch_add(1, Ordering::SeqCst);
            let (open, opened) = &**gate;
            let mut is_open = open.lock().unwrap();
            while !*is_open {
                is_open = opened.wait(is_open).unwrap();
            }
            drop(is_open);
            if stream
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n")
                .is_err()
            {
                return;
            }
        }
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

fn status_of(mut stream: TcpStream) -> u16 {
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    std::str::from_utf8(answer.get(9..12).unwrap_or_default())
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

const A: [u8; 4] = [127, 9, 1, 1];
const B: [u8; 4] = [127, 9, 1, 2];

/// The sequence against the server at `front` whose backend is `backend`: each request that
/// should be held is waited for at the backend before the next is sent. The statuses in
/// sending order.
fn sequence(front: SocketAddr, backend: &Gated, gate: &Gate) -> Vec<u16> {
    let held = |n: usize| {
        common::wait_until(Duration::from_secs(10), "the backend holds it", || {
            let seen = backend.seen.load(Ordering::SeqCst);
            (seen == n).then_some(()).ok_or(format!("{seen} held"))
        })
    };
    let mut statuses = vec![0; 7];
    let a1 = get_from(A, front);
    held(1);
    let a2 = get_from(A, front);
    held(2);
    statuses[2] = status_of(get_from(A, front));
    let b1 = get_from(B, front);
    held(3);
    statuses[4] = status_of(get_from(A, front));
    *gate.0.lock().unwrap() = true;
    gate.1.notify_all();
    for (i, held) in [(0, a1), (1, a2), (3, b1)] {
        statuses[i] = status_of(held);
    }
    // The places came back: A may send again (its requests ended when their answers were
    // read whole, and the connections closed).
    statuses[5] = status_of(get_from(A, front));
    statuses[6] = status_of(get_from(A, front));
    *gate.0.lock().unwrap() = false;
    statuses
}

#[test]
fn the_same_requests_get_nginx_s_limit_conn_answers() {
    let theirs_gate: Gate = Arc::new((Mutex::new(false), Condvar::new()));
    let ours_gate: Gate = Arc::new((Mutex::new(false), Condvar::new()));
    let (theirs_backend, ours_backend) = (gated(&theirs_gate), gated(&ours_gate));
    let dir = TempDir::new("limit_conn", "nginx");
    let port = HeldPort::for_server();
    let front = port.port();
    let d = dir.path();
    let backend = theirs_backend.addr;
    let conf = format!(
        "daemon off;\nmaster_process off;\npid {d}/nginx.pid;\nevents {{ worker_connections 256; }}\n\
         http {{\n  access_log off;\n  client_body_temp_path {d}; proxy_temp_path {d}; fastcgi_temp_path {d};\n  \
         uwsgi_temp_path {d}; scgi_temp_path {d};\n  \
         limit_conn_zone $binary_remote_addr zone=c:1m;\n  \
         server {{ listen 127.0.0.1:{front}; location / {{ limit_conn c 2; proxy_pass http://{backend}; }} }}\n}}\n"
    );
    let _nginx = common::spawn_nginx(&dir, &conf);
    let theirs: SocketAddr = format!("127.0.0.1:{front}").parse().unwrap();
    common::wait_until(Duration::from_secs(10), "nginx answers", || {
        TcpStream::connect(theirs)
            .map(|_| ())
            .map_err(|e| e.to_string())
    });
    let config = TempFile::new(
        "limit-conn-nginx.toml",
        &format!(
            "workers = 2\naccess_log = false\n\n\
             [[listener]]\nlisten = \"127.0.0.1:0\"\nupstream = \"web\"\nlimit_conn = {{ max = 2 }}\n\n\
             [[upstream]]\nname = \"web\"\n[[upstream.backend]]\naddr = \"{}\"\n",
            ours_backend.addr
        ),
    );
    let fulcrum = Running::start(&config, 1);
    let ours = fulcrum.addr_of("web");

    let nginx = sequence(theirs, &theirs_backend, &theirs_gate);
    let fulcrum = sequence(ours, &ours_backend, &ours_gate);
    println!("limit_conn 2: nginx {nginx:?}, fulcrum {fulcrum:?}");
    assert_eq!(nginx, [200, 200, 503, 200, 503, 200, 200], "nginx's own");
    assert_eq!(fulcrum, nginx);
}
