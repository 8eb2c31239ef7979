//! WebSocket through a running `fulcrum run`: a maintained client and server (tungstenite) on
//! either side, so the tunnel is checked against RFC 6455 as others implement it. The pick
//! holds for the connection's life (least_conn sees it, the admin API counts it in flight
//! until it closes), a backend's refusal is answered as any response, a listener that does
//! not allow the upgrade never tunnels, and a silent tunnel is closed after `idle_timeout`.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::{Running, TempFile, in_flight};
use futures_util::{SinkExt as _, StreamExt as _};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};

/// A WebSocket backend named `name`: echoes every message, answers `who` with its name, and
/// refuses the handshake for `/refuse` with 403.
async fn start_backend(name: &'static str) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                // The callback's type is tungstenite's, large error and all.
                #[allow(clippy::result_large_err)]
                let check = |req: &Request, res: Response| -> Result<Response, ErrorResponse> {
                    if req.uri().path() == "/refuse" {
                        let mut no = ErrorResponse::new(Some("not here".to_owned()));
                        *no.status_mut() = http::StatusCode::FORBIDDEN;
                        return Err(no);
                    }
                    Ok(res)
                };
                let Ok(mut ws) = tokio_tungstenite::accept_hdr_async(stream, check).await else {
                    return;
                };
                while let Some(Ok(msg)) = ws.next().await {
                    let reply = match &msg {
                        Message::Text(t) if t.as_str() == "who" => Message::text(name),
                        Message::Text(_) | Message::Binary(_) => msg,
                        _ => continue,
                    };
                    if ws.send(reply).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// A backend that answers any request with a 101 to h2c.
async fn start_odd_switcher() -> SocketAddr {
    use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut r = tokio::io::BufReader::new(stream);
                loop {
                    let mut line = String::new();
                    if r.read_line(&mut line).await.unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                }
                let _ = r
                    .get_mut()
                    .write_all(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n")
                    .await;
                // Held open, as a switched connection would be.
                let _ = r.read_line(&mut String::new()).await;
            });
        }
    });
    addr
}

/// An HTTP backend that answers every request with its head, lower case, as the body.
async fn start_header_echo() -> SocketAddr {
    use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut r = tokio::io::BufReader::new(stream);
                let mut head = String::new();
                loop {
                    let mut line = String::new();
                    if r.read_line(&mut line).await.unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    head.push_str(&line.to_ascii_lowercase());
                }
                let reply = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{head}",
                    head.len()
                );
                let _ = r.get_mut().write_all(reply.as_bytes()).await;
            });
        }
    });
    addr
}

async fn wait_in_flight(admin: SocketAddr, want: &[u64]) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let now = in_flight(admin, "ws");
        if now == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "in flight {now:?}, want {want:?}"
        );
        // Poll interval of a loop bounded by `deadline`.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websockets_tunnel_through_with_their_pick_held_until_they_close() {
    let names = ["ws-a", "ws-b", "ws-c"];
    let mut backends = Vec::new();
    for name in names {
        backends.push(start_backend(name).await);
    }
    let block: String = backends
        .iter()
        .map(|a| format!("  [[upstream.backend]]\n  addr = \"{a}\"\n"))
        .collect();
    let echo = start_header_echo().await;
    let odd = start_odd_switcher().await;
    let config = TempFile::new(
        "websocket.toml",
        &format!(
            "workers = 2\nshutdown_timeout = \"1s\"\n\n\
             [[listener]]\nlisten = \"127.0.0.1:0\"\nupstream = \"ws\"\nupgrade = [\"websocket\"]\nidle_timeout = \"2s\"\n\n\
             [[listener]]\nlisten = \"127.0.0.1:0\"\nupstream = \"plain\"\n\n\
             [[listener]]\nlisten = \"127.0.0.1:0\"\nupstream = \"odd\"\nupgrade = [\"websocket\"]\n\n\
             [[upstream]]\nname = \"odd\"\n  [[upstream.backend]]\n  addr = \"{odd}\"\n\n\
             [[upstream]]\nname = \"ws\"\nalgorithm = \"least_conn\"\n{block}\n\
             [[upstream]]\nname = \"plain\"\n  [[upstream.backend]]\n  addr = \"{echo}\"\n\n\
             [admin]\nlisten = \"127.0.0.1:0\"\n"
        ),
    );
    let fulcrum = tokio::task::block_in_place(|| Running::start(&config, 3));
    let front = fulcrum.addr_of("ws");
    let admin = fulcrum
        .admin
        .expect("the admin listener's address is logged");

    // Three sockets held open: least_conn gives each its own backend, and each is in flight
    // on it for as long as it is open.
    let mut open = Vec::new();
    let mut reached = Vec::new();
    for _ in 0..3 {
        let (mut ws, answer) = tokio_tungstenite::connect_async(format!("ws://{front}/chat"))
            .await
            .expect("the handshake passes through");
        assert_eq!(answer.status(), 101);
        ws.send(Message::text("who")).await.unwrap();
        let who = ws.next().await.unwrap().unwrap();
        reached.push(who.to_text().unwrap().to_owned());
        open.push(ws);
    }
    reached.sort();
    assert_eq!(reached, names, "least_conn spread the sockets");
    wait_in_flight(admin, &[1, 1, 1]).await;

    // Many messages each way on one of them, text and binary, in order.
    let ws = &mut open[0];
    let began = Instant::now();
    for i in 0..2000u32 {
        let msg = if i % 2 == 0 {
            Message::text(format!("message {i}"))
        } else {
            Message::binary(i.to_be_bytes().repeat(100))
        };
        ws.send(msg.clone()).await.unwrap();
        assert_eq!(ws.next().await.unwrap().unwrap(), msg);
    }
    println!("2000 echoes through the tunnel in {:?}", began.elapsed());

    // Closing one ends its pick; the others stay counted.
    let mut first = open.remove(0);
    first.close(None).await.unwrap();
    while first.next().await.is_some() {}
    // The backend closed after the close handshake; the tunnel ends when the client's side
    // does too (a half-closed tunnel still carries the other way).
    drop(first);
    let deadline = Instant::now() + Duration::from_secs(5);
    let after_close = loop {
        let now = in_flight(admin, "ws");
        if now.iter().sum::<u64>() == 2 {
            break now;
        }
        assert!(
            Instant::now() < deadline,
            "in flight {now:?} after one closed"
        );
        // Poll interval of a loop bounded by `deadline`.
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // The freed backend gets the next socket.
    let (mut next, _) = tokio_tungstenite::connect_async(format!("ws://{front}/chat"))
        .await
        .unwrap();
    next.send(Message::text("who")).await.unwrap();
    let who = next.next().await.unwrap().unwrap();
    let freed = names[after_close.iter().position(|&n| n == 0).unwrap()];
    assert_eq!(who.to_text().unwrap(), freed);
    drop(next);
    drop(open);
    wait_in_flight(admin, &[0, 0, 0]).await;

    // A backend's refusal is an ordinary answer (no tunnel), and the socket is not counted.
    match tokio_tungstenite::connect_async(format!("ws://{front}/refuse")).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(res)) => assert_eq!(res.status(), 403),
        other => panic!("expected the backend's 403, got {other:?}"),
    }
    wait_in_flight(admin, &[0, 0, 0]).await;

    // A listener that does not allow the upgrade never tunnels: its backend (which echoes the
    // head it got) sees neither `Upgrade` nor `Connection: upgrade`, and answers the plain
    // request.
    let plain = fulcrum.addr_of("plain");
    let answer = tokio::task::block_in_place(|| {
        use std::io::{Read as _, Write as _};
        let mut s = std::net::TcpStream::connect(plain).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(b"GET /chat HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, close\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n").unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).unwrap();
        answer
    });
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let (_, head) = answer.split_once("\r\n\r\n").unwrap();
    assert!(
        head.contains("sec-websocket-key: "),
        "the backend's echo: {head}"
    );
    assert!(!head.contains("upgrade"), "the backend's echo: {head}");

    // A backend that switches to a protocol the client did not offer (h2c for a WebSocket
    // request): no tunnel, a 502 (RFC 9110 §15.2.2).
    let odd_front = fulcrum.addr_of("odd");
    match tokio_tungstenite::connect_async(format!("ws://{odd_front}/chat")).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(res)) => assert_eq!(res.status(), 502),
        other => panic!("expected 502, got {other:?}"),
    }

    // A silent tunnel is closed after idle_timeout (2 s).
    let (mut quiet, _) = tokio_tungstenite::connect_async(format!("ws://{front}/chat"))
        .await
        .unwrap();
    let began = Instant::now();
    let end = tokio::time::timeout(Duration::from_secs(10), quiet.next()).await;
    let idle_for = began.elapsed();
    println!("silent tunnel ended after {idle_for:?}: {end:?}");
    assert!(
        matches!(end, Ok(None) | Ok(Some(Err(_)))),
        "the tunnel ended: {end:?}"
    );
    assert!(
        // The timer starts when fulcrum sends the 101, a moment before the client has read
        // it: a noisy machine may take some of the 2 s away from what is measured here.
        idle_for >= Duration::from_millis(1500) && idle_for < Duration::from_secs(6),
        "{idle_for:?}"
    );
    wait_in_flight(admin, &[0, 0, 0]).await;
}
