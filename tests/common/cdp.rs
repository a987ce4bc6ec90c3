//! A headless Chromium driven through the DevTools protocol, for the web
//! page's tests: one page, commands sent and answered over its WebSocket
//! (events skipped), JavaScript evaluated for values, text typed as a
//! user would, screenshots decoded to pixels.
//!
//! SKIPPED without Chromium (`chromium` on PATH, or `$ZT_CHROMIUM`),
//! unless `ZT_REQUIRE_BROWSER=1`.

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tungstenite::stream::MaybeTlsStream;
use tungstenite::{Message, WebSocket};

/// The browser binary, or `None` (SKIPPED) where there is none.
pub fn chromium() -> Option<PathBuf> {
    let path = std::env::var_os("ZT_CHROMIUM")
        .map(PathBuf::from)
        .or_else(|| {
            ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
                .iter()
                .map(PathBuf::from)
                .find(|p| p.is_file())
        });
    if path.is_none() {
        let required = std::env::var("ZT_REQUIRE_BROWSER").is_ok_and(|v| v == "1");
        assert!(!required, "ZT_REQUIRE_BROWSER=1 but there is no chromium");
        eprintln!("SKIPPED: no chromium");
    }
    path
}

/// A running headless browser and the socket of its one page.
pub struct Browser {
    child: Child,
    socket: WebSocket<MaybeTlsStream<TcpStream>>,
    next: u64,
    _profile: tempfile::TempDir,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Browser {
    /// Starts `bin` headless (as root it needs `--no-sandbox`) with a
    /// 1200 x 1400 window, and attaches to its page.
    pub fn start(bin: &PathBuf) -> Browser {
        let profile = tempfile::tempdir().unwrap();
        let mut child = Command::new(bin)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--hide-scrollbars",
                "--remote-debugging-port=0",
                "--window-size=1200,1400",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start chromium");
        // "DevTools listening on ws://127.0.0.1:PORT/devtools/browser/ID"
        let stderr = child.stderr.take().unwrap();
        let mut lines = BufReader::new(stderr).lines();
        let port = loop {
            let line = lines
                .next()
                .expect("chromium exited before listening")
                .unwrap();
            if let Some(rest) = line.split("ws://127.0.0.1:").nth(1) {
                break rest.split('/').next().unwrap().to_owned();
            }
        };
        // Keep reading its log so that it never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        let list = super::curl(&[], &format!("http://127.0.0.1:{port}/json/list"));
        let targets: Value = serde_json::from_slice(&list.body).unwrap();
        let ws = targets
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["type"] == "page")
            .and_then(|t| t["webSocketDebuggerUrl"].as_str())
            .expect("a page target")
            .to_owned();
        let (socket, _) = tungstenite::connect(ws.as_str()).expect("attach to the page");
        let mut b = Browser {
            child,
            socket,
            next: 0,
            _profile: profile,
        };
        b.call("Page.enable", json!({}));
        b.call("Runtime.enable", json!({}));
        b
    }

    /// Sends a command and returns its result (events in between skipped).
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        self.try_call(method, params)
            .unwrap_or_else(|e| panic!("{method}: {e}"))
    }

    /// [`Browser::call`], the browser's error returned.
    pub fn try_call(&mut self, method: &str, params: Value) -> Result<Value, Value> {
        self.next += 1;
        let id = self.next;
        let msg = json!({ "id": id, "method": method, "params": params });
        self.socket
            .send(Message::Text(msg.to_string().into()))
            .unwrap();
        loop {
            let m = self.socket.read().expect("the browser's answer");
            let Message::Text(text) = m else { continue };
            let v: Value = serde_json::from_str(text.as_str()).unwrap();
            if v["id"] == id {
                if !v["error"].is_null() {
                    return Err(v["error"].clone());
                }
                return Ok(v["result"].clone());
            }
        }
    }

    /// The value of a JavaScript expression on the page.
    pub fn eval(&mut self, expression: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            json!({ "expression": expression, "returnByValue": true, "awaitPromise": true }),
        );
        assert!(
            r["exceptionDetails"].is_null(),
            "{expression}: {}",
            r["exceptionDetails"]
        );
        r["result"]["value"].clone()
    }

    /// Loads `url` and waits until `ready` (an expression) is true.
    pub fn open(&mut self, url: &str, ready: &str) {
        self.call("Page.navigate", json!({ "url": url }));
        self.wait(ready);
    }

    /// Waits (at most 15 s) until the expression `cond` is true.
    pub fn wait(&mut self, cond: &str) {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if self.eval(&format!("!!({cond})")) == Value::Bool(true) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "never true: {cond}\n{}",
                self.eval("document.body ? document.body.innerText : ''")
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// How many elements match `selector`, read through the DOM domain
    /// (no script runs on the page); 0 while a document is being replaced.
    pub fn count(&mut self, selector: &str) -> usize {
        let Ok(doc) = self.try_call("DOM.getDocument", json!({ "depth": 0 })) else {
            return 0;
        };
        let root = doc["root"]["nodeId"].clone();
        self.try_call(
            "DOM.querySelectorAll",
            json!({ "nodeId": root, "selector": selector }),
        )
        .map_or(0, |found| found["nodeIds"].as_array().map_or(0, Vec::len))
    }

    /// Focuses the element `selector` and types `text` into it, as keys
    /// would (the page sees `input` events).
    pub fn type_into(&mut self, selector: &str, text: &str) {
        let sel = serde_json::to_string(selector).unwrap();
        self.eval(&format!(
            "(() => {{ const e = document.querySelector({sel}); e.focus(); e.select && e.select(); return true; }})()"
        ));
        self.call("Input.insertText", json!({ "text": text }));
    }

    /// A PNG screenshot of the viewport, saved as `path`; its pixels
    /// (RGBA) and width.
    pub fn screenshot(&mut self, path: &std::path::Path) -> (Vec<u8>, u32) {
        let r = self.call("Page.captureScreenshot", json!({ "format": "png" }));
        let png = base64(r["data"].as_str().unwrap());
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, &png).unwrap();
        let mut decoder = png::Decoder::new(std::io::Cursor::new(png));
        decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::ALPHA);
        let mut reader = decoder.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size().unwrap()];
        let info = reader.next_frame(&mut buf).unwrap();
        buf.truncate(info.buffer_size());
        assert_eq!(info.color_type, png::ColorType::Rgba);
        (buf, info.width)
    }
}

/// Standard base64, decoded (the protocol's screenshots).
fn base64(text: &str) -> Vec<u8> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    let (mut acc, mut bits) = (0u32, 0);
    for c in text.bytes().filter(|c| *c != b'=') {
        let v = ALPHABET.iter().position(|a| *a == c).expect("base64") as u32;
        acc = acc << 6 | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    out
}
