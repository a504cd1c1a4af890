//! A small HTTPS file server on 127.0.0.1 for download tests: a self-signed certificate
//! made with rcgen, one file, optional Range support, and connections that break midway.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::{ServerConfig, ServerConnection, StreamOwned};

/// The served file's path on the server.
pub const FILE_PATH: &str = "/files/model.gguf";

/// Enough for every test; the accept loop ends after this many connections.
const MAX_CONNECTIONS: usize = 32;
const MAX_HEAD_BYTES: usize = 16 * 1024;

#[derive(Clone, Copy, Debug)]
pub enum Breaks {
    Never,
    /// The first answer to a request for the file stops after this many body bytes.
    FirstAfter(usize),
    /// Every answer to a request for the file stops after this many body bytes.
    AlwaysAfter(usize),
}

#[derive(Clone, Copy, Debug)]
pub struct Behavior {
    pub honors_range: bool,
    pub breaks: Breaks,
}

pub struct TestServer {
    pub base: String,
    pub cert_pem: String,
    /// The `Range` header of every request for the file, in order.
    ranges: Arc<Mutex<Vec<Option<String>>>>,
}

impl TestServer {
    pub fn start(body: Vec<u8>, behavior: Behavior) -> Self {
        let certified = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()])
            .expect("generating a test certificate");
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
            certified.signing_key.serialize_der(),
        ));
        let config = ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(vec![certified.cert.der().clone()], key)
            .expect("building the test server's TLS config");
        let config = Arc::new(config);
        let listener = TcpListener::bind("127.0.0.1:0").expect("binding 127.0.0.1");
        let base = format!("https://{}", listener.local_addr().unwrap());
        let ranges = Arc::new(Mutex::new(Vec::new()));
        let served = Arc::clone(&ranges);
        let body = Arc::new(body);
        std::thread::spawn(move || {
            for stream in listener.incoming().take(MAX_CONNECTIONS) {
                let Ok(stream) = stream else { continue };
                // A failing connection only fails the test through what the client sees.
                let _ = serve(stream, Arc::clone(&config), &body, behavior, &served);
            }
        });
        Self {
            base,
            cert_pem: certified.cert.pem(),
            ranges,
        }
    }

    pub fn file_url(&self) -> String {
        format!("{}{FILE_PATH}", self.base)
    }

    pub fn ranges(&self) -> Vec<Option<String>> {
        self.ranges.lock().unwrap().clone()
    }

    /// A client that trusts this server's certificate, ignores proxy settings and retries
    /// at once.
    pub fn client(&self) -> plumb_hub::HttpClient {
        plumb_hub::HttpClient::new(
            test_config().trust_pem("test certificate", self.cert_pem.clone().into_bytes()),
        )
        .expect("building a client")
    }
}

pub fn test_config() -> plumb_hub::HttpConfig {
    let mut config = plumb_hub::HttpConfig::default();
    config.proxy_from_env = false;
    config.max_attempts = 3;
    config.retry_delay = Duration::ZERO;
    config
}

fn serve(
    stream: TcpStream,
    config: Arc<ServerConfig>,
    body: &[u8],
    behavior: Behavior,
    ranges: &Mutex<Vec<Option<String>>>,
) -> io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    stream.set_write_timeout(Some(Duration::from_secs(10)))?;
    let conn = ServerConnection::new(config).map_err(io::Error::other)?;
    let mut tls = StreamOwned::new(conn, stream);
    let head = read_head(&mut tls)?;
    let path = head
        .lines()
        .next()
        .and_then(|line| line.split_whitespace().nth(1))
        .unwrap_or("")
        .to_string();
    if path != FILE_PATH {
        let text = b"not found";
        write!(
            tls,
            "HTTP/1.1 404 Not Found\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            text.len()
        )?;
        tls.write_all(text)?;
        return close(tls);
    }
    let range = head.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.trim()
            .eq_ignore_ascii_case("range")
            .then(|| value.trim().to_string())
    });
    let request_number = {
        let mut ranges = ranges.lock().unwrap();
        ranges.push(range.clone());
        ranges.len()
    };
    let start = range
        .as_deref()
        .filter(|_| behavior.honors_range)
        .and_then(|r| r.strip_prefix("bytes="))
        .and_then(|r| r.strip_suffix('-'))
        .and_then(|r| r.parse::<usize>().ok());
    let len = body.len();
    let (head, part) = match start {
        Some(start) if start >= len => {
            let head = format!(
                "HTTP/1.1 416 Range Not Satisfiable\r\nContent-Range: bytes */{len}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
            (head, &body[..0])
        }
        Some(start) => {
            let head = format!(
                "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes {start}-{}/{len}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                len - 1,
                len - start
            );
            (head, &body[start..])
        }
        None => {
            let head =
                format!("HTTP/1.1 200 OK\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n");
            (head, body)
        }
    };
    tls.write_all(head.as_bytes())?;
    let cut = match behavior.breaks {
        Breaks::FirstAfter(n) if request_number == 1 => Some(n),
        Breaks::AlwaysAfter(n) => Some(n),
        _ => None,
    };
    match cut {
        Some(n) if n < part.len() => {
            tls.write_all(&part[..n])?;
            tls.flush()?;
            // No TLS close_notify: the client sees the connection drop mid-body.
            tls.sock.shutdown(Shutdown::Both)
        }
        _ => {
            tls.write_all(part)?;
            close(tls)
        }
    }
}

fn read_head(tls: &mut StreamOwned<ServerConnection, TcpStream>) -> io::Result<String> {
    let mut head = Vec::new();
    let mut byte = [0u8];
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() > MAX_HEAD_BYTES || tls.read(&mut byte)? == 0 {
            return Err(io::Error::other("incomplete request head"));
        }
        head.push(byte[0]);
    }
    Ok(String::from_utf8_lossy(&head).into_owned())
}

fn close(mut tls: StreamOwned<ServerConnection, TcpStream>) -> io::Result<()> {
    tls.conn.send_close_notify();
    tls.flush()?;
    tls.sock.shutdown(Shutdown::Write)
}
