//! Zero-downtime restarts and binary upgrades: a new fulcrum takes the listening sockets over
//! from the running one through a Unix socket (`--upgrade-socket`), as HAProxy's `-x` does,
//! so that no connection is ever refused.
//!
//! The running process ([`Offer`]) listens on the Unix socket. A new process ([`take_over`])
//! connects and says `TAKEOVER`; the old one answers with each listening socket's name (its
//! configured address, or `admin`) as one line of text and the descriptors themselves
//! (`SCM_RIGHTS`), in the same order. The new process binds what it did not receive, starts
//! serving, and says `READY`; the old one removes the Unix socket's path, answers `RELEASED`,
//! stops accepting and drains its connections as at shutdown. The new process then listens on
//! the path itself, ready for the next upgrade. Both processes share each listening socket in
//! the kernel, so its queue never closes: a connection that arrives in between is accepted by
//! one or the other.
//!
//! Anything that goes wrong before `READY` leaves the old process serving as before.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, IoSlice, IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, recvmsg, sendmsg,
};

/// The most sockets handed over (the kernel's `SCM_MAX_FD` is 253).
pub const MAX_SOCKETS: usize = 250;

/// How long each step of the exchange may take.
const STEP: Duration = Duration::from_secs(10);

/// The listening sockets received from the previous process, by name.
#[derive(Debug, Default)]
pub struct Inherited(HashMap<String, TcpListener>);

impl Inherited {
    /// The socket named `name` (a configured listen address, or `admin`), if it came.
    pub fn take(&mut self, name: &str) -> Option<TcpListener> {
        self.0.remove(name)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The name a listener is handed over under: its configured address.
pub fn name_of(configured: SocketAddr) -> String {
    configured.to_string()
}

fn err(what: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(what.to_string())
}

/// A new process's side: asks the process listening on `path` for its sockets. `Ok(None)`
/// when nobody listens there (a first start).
pub fn take_over(path: &Path) -> std::io::Result<Option<(Inherited, Handshake)>> {
    let mut stream = match UnixStream::connect(path) {
        Ok(s) => s,
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
            ) =>
        {
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    stream.set_read_timeout(Some(STEP))?;
    stream.set_write_timeout(Some(STEP))?;
    stream.write_all(b"TAKEOVER\n")?;
    let mut names = vec![0u8; 64 * 1024];
    let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_SOCKETS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let got = recvmsg(
        &stream,
        &mut [IoSliceMut::new(&mut names)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )?;
    let mut fds: Vec<OwnedFd> = Vec::new();
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(received) = message {
            fds.extend(received);
        }
    }
    let text = std::str::from_utf8(&names[..got.bytes]).map_err(err)?;
    let names: Vec<&str> = text.lines().collect();
    if names.len() != fds.len() {
        return Err(err(format!(
            "the running fulcrum named {} sockets and sent {}",
            names.len(),
            fds.len()
        )));
    }
    let sockets = names
        .into_iter()
        .map(str::to_owned)
        .zip(fds.into_iter().map(TcpListener::from))
        .collect();
    Ok(Some((Inherited(sockets), Handshake { stream })))
}

/// The rest of a take-over, on the new process's side.
#[derive(Debug)]
pub struct Handshake {
    stream: UnixStream,
}

impl Handshake {
    /// Tells the old process the new one serves; returns once it has let go of the path (it
    /// then stops accepting and drains).
    pub fn ready(mut self) -> std::io::Result<()> {
        self.stream.write_all(b"READY\n")?;
        let mut line = String::new();
        BufReader::new(&self.stream).read_line(&mut line)?;
        if line.trim() != "RELEASED" {
            return Err(err(format!(
                "the running fulcrum answered {:?} instead of RELEASED",
                line.trim()
            )));
        }
        Ok(())
    }
}

/// The running process's side: the Unix socket new processes ask.
#[derive(Debug)]
pub struct Offer {
    listener: UnixListener,
    path: PathBuf,
}

impl Offer {
    /// Listens on `path` (a stale socket file left by a process that died is replaced).
    pub fn bind(path: &Path) -> std::io::Result<Offer> {
        if UnixStream::connect(path).is_err() {
            let _ = std::fs::remove_file(path);
        }
        let listener = UnixListener::bind(path)?;
        Ok(Offer {
            listener,
            path: path.to_owned(),
        })
    }

    /// Waits for a new process and hands it `sockets` (name, socket); returns once it is
    /// serving and the path is free, so the caller stops accepting and drains. A failed
    /// exchange is logged and the offer stands for the next one. Blocking: run it on a
    /// thread of its own.
    pub fn serve(&self, sockets: &dyn Fn() -> Vec<(String, TcpListener)>) {
        loop {
            let stream = match self.listener.accept() {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "upgrade socket: accept failed");
                    std::thread::sleep(Duration::from_millis(100));
                    continue;
                }
            };
            match self.hand_over(stream, &sockets()) {
                Ok(()) => return,
                Err(e) => {
                    tracing::error!(error = %e, "a new fulcrum asked for the sockets and the exchange failed; serving on")
                }
            }
        }
    }

    fn hand_over(
        &self,
        mut stream: UnixStream,
        sockets: &[(String, TcpListener)],
    ) -> std::io::Result<()> {
        stream.set_read_timeout(Some(STEP))?;
        stream.set_write_timeout(Some(STEP))?;
        let mut reader = BufReader::new(stream.try_clone()?);
        let mut line = String::new();
        reader.read_line(&mut line)?;
        if line.trim() != "TAKEOVER" {
            return Err(err(format!("unexpected request {:?}", line.trim())));
        }
        if sockets.len() > MAX_SOCKETS {
            return Err(err(format!(
                "{} listening sockets: at most {MAX_SOCKETS} can be handed over",
                sockets.len()
            )));
        }
        let names: String = sockets.iter().map(|(n, _)| format!("{n}\n")).collect();
        let fds: Vec<BorrowedFd<'_>> = sockets.iter().map(|(_, s)| s.as_fd()).collect();
        let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_SOCKETS))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
            return Err(err("the descriptors do not fit one message"));
        }
        let sent = sendmsg(
            &stream,
            &[IoSlice::new(names.as_bytes())],
            &mut control,
            SendFlags::empty(),
        )?;
        if sent != names.len() {
            return Err(err("the socket names were cut short"));
        }
        tracing::info!(
            sockets = sockets.len(),
            "sockets handed to a new fulcrum; waiting for it to serve"
        );
        line.clear();
        // The new process may take a while to start its workers.
        stream.set_read_timeout(Some(STEP * 6))?;
        reader.read_line(&mut line)?;
        if line.trim() != "READY" {
            return Err(err(format!(
                "the new fulcrum said {:?} instead of READY",
                line.trim()
            )));
        }
        std::fs::remove_file(&self.path)?;
        stream.write_all(b"RELEASED\n")?;
        let _ = stream.read(&mut [0u8; 1]);
        Ok(())
    }
}
