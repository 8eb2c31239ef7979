//! Headless Chromium for the tests that render our pages (the dashboard, the lab and sim
//! reports): started with a DevTools port, driven over its WebSocket.

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use lab::Client;
use serde_json::Value;

/// Headless Chromium driven through the DevTools protocol (over its WebSocket), so a test can
/// run script in a page as a user's browser would: the requests it sends carry the browser's
/// own `Origin`, `Sec-Fetch-*` and preflights, which no test client imitates faithfully.
pub struct Chromium {
    child: std::process::Child,
    /// The DevTools HTTP endpoint.
    devtools: SocketAddr,
    _profile: super::TempDir,
}

impl Chromium {
    pub fn start() -> Chromium {
        let profile = super::TempDir::new("admin", "chromium-cdp");
        let child = Command::new("chromium")
            // No sandbox: it needs user namespaces containers often lack; the pages are ours
            // or the lab's, on loopback.
            .args(["--headless", "--no-sandbox", "--disable-gpu"])
            .arg(format!("--user-data-dir={}", profile.path()))
            .args([
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0",
            ])
            .arg("about:blank")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut chromium = Chromium {
            child,
            devtools: "127.0.0.1:0".parse().unwrap(),
            _profile: profile,
        };
        // Chromium writes the port it took to DevToolsActivePort in the profile.
        let file = std::path::Path::new(chromium._profile.path()).join("DevToolsActivePort");
        let mut port = 0u16;
        super::wait_until(Duration::from_secs(30), "chromium's DevTools port", || {
            let text = std::fs::read_to_string(&file).map_err(|e| e.to_string())?;
            port = text
                .lines()
                .next()
                .and_then(|l| l.parse().ok())
                .ok_or_else(|| "not yet written".to_owned())?;
            Ok(())
        });
        chromium.devtools.set_port(port);
        chromium
    }

    /// A new tab at `url`, once loaded: the WebSocket of its DevTools session.
    pub async fn open(&self, url: &str) -> Tab {
        let req = Request::put(format!("/json/new?{url}"))
            .header("host", self.devtools.to_string())
            .body(Full::new(Bytes::new()))
            .unwrap();
        let reply = Client::new(self.devtools).send(req).await.unwrap();
        let target: Value =
            serde_json::from_str(&reply.text()).unwrap_or_else(|e| panic!("{e}: {}", reply.text()));
        let ws = target["webSocketDebuggerUrl"].as_str().unwrap().to_owned();
        let (ws, _) = tokio_tungstenite::connect_async(ws).await.unwrap();
        let mut tab = Tab { ws, next: 0 };
        let want = format!("{url} complete");
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let now = tab
                .evaluate("location.href + ' ' + document.readyState")
                .await;
            if now.as_ref().ok().and_then(|v| v.as_str()) == Some(want.as_str()) {
                return tab;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{url} did not load: {now:?}"
            );
            // Poll interval of a loop bounded by `deadline`.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Chromium {
    fn drop(&mut self) {
        // SIGTERM lets it take its helper processes down with it.
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            // Poll interval of a loop bounded by `deadline`.
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One tab's DevTools session.
pub struct Tab {
    ws: tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
    next: u64,
}

impl Tab {
    /// `expression` run in the page (a promise awaited): its value, or what went wrong.
    pub async fn evaluate(&mut self, expression: &str) -> Result<Value, String> {
        let params = serde_json::json!({ "expression": expression, "awaitPromise": true, "returnByValue": true });
        let answer = self.call("Runtime.evaluate", params).await?;
        if let Some(e) = answer.get("exceptionDetails") {
            return Err(e.to_string());
        }
        Ok(answer["result"]["value"].clone())
    }

    /// The window's size, as a browser window of `width` × `height` CSS pixels would have.
    pub async fn resize(&mut self, width: u32, height: u32) -> Result<(), String> {
        let params = serde_json::json!({
            "width": width, "height": height, "deviceScaleFactor": 1, "mobile": false,
        });
        self.call("Emulation.setDeviceMetricsOverride", params)
            .await
            .map(drop)
    }

    /// A PNG of the whole page (not only the viewport).
    pub async fn screenshot(&mut self) -> Result<Vec<u8>, String> {
        use base64::Engine as _;
        let params = serde_json::json!({ "format": "png", "captureBeyondViewport": true });
        let answer = self.call("Page.captureScreenshot", params).await?;
        let data = answer["data"].as_str().ok_or("no image data")?;
        base64::engine::general_purpose::STANDARD
            .decode(data)
            .map_err(|e| e.to_string())
    }

    /// One DevTools command: its `result`, or the error it answered.
    pub async fn call(&mut self, method: &str, params: Value) -> Result<Value, String> {
        use futures_util::{SinkExt as _, StreamExt as _};
        use tokio_tungstenite::tungstenite::Message;
        self.next += 1;
        let id = self.next;
        let call = serde_json::json!({ "id": id, "method": method, "params": params });
        self.ws
            .send(Message::text(call.to_string()))
            .await
            .map_err(|e| e.to_string())?;
        let answer = tokio::time::timeout(Duration::from_secs(30), async {
            while let Some(message) = self.ws.next().await {
                let Ok(Message::Text(text)) = message else {
                    continue;
                };
                let v: Value = serde_json::from_str(&text).unwrap_or_default();
                if v["id"] == id {
                    return Some(v);
                }
            }
            None
        })
        .await
        .map_err(|_| "no answer within 30 s".to_owned())?
        .ok_or("the DevTools session closed")?;
        if let Some(e) = answer.get("error") {
            return Err(e.to_string());
        }
        Ok(answer["result"].clone())
    }
}
