//! A counting TCP proxy in front of Postgres: what the store sends and how
//! often it waits. A *round trip* is a burst of client bytes that follows
//! server bytes on the same connection (the client had to wait for an
//! answer before it could go on); statements pipelined together are one
//! round trip, however many they are. Only the bench's round-trip pass goes
//! through it, so its copying costs nothing in the throughput figures.
//! `BENCH_WIRE_TRACE=1` prints the start of every round trip's first burst
//! (which statements went together) to stderr.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use anyhow::Context;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// Totals over every connection through the proxy.
#[derive(Debug, Default)]
struct Counters {
    round_trips: AtomicU64,
    bytes_sent: AtomicU64,
    bytes_received: AtomicU64,
}

/// A point-in-time copy of the counters.
#[derive(Debug, Clone, Copy, Default)]
pub struct WireSample {
    pub round_trips: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
}

impl WireSample {
    /// Per-item figures from `self` to `later`.
    pub fn per(&self, later: &WireSample, n: usize) -> WirePer {
        let n = n.max(1) as f64;
        WirePer {
            round_trips: (later.round_trips - self.round_trips) as f64 / n,
            bytes_sent: (later.bytes_sent - self.bytes_sent) as f64 / n,
            bytes_received: (later.bytes_received - self.bytes_received) as f64 / n,
        }
    }
}

/// Round trips and bytes per item (cycle, park or resume).
#[derive(Debug, Clone, Copy, Default)]
pub struct WirePer {
    pub round_trips: f64,
    pub bytes_sent: f64,
    pub bytes_received: f64,
}

pub struct Proxy {
    port: u16,
    counters: Arc<Counters>,
    stop: CancellationToken,
}

impl Proxy {
    /// Listens on an ephemeral port of 127.0.0.1 and forwards every
    /// connection to `upstream` (`host:port`).
    pub async fn start(upstream: String) -> anyhow::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let counters = Arc::new(Counters::default());
        let stop = CancellationToken::new();
        let (c, s) = (counters.clone(), stop.clone());
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    accepted = listener.accept() => accepted,
                    () = s.cancelled() => return,
                };
                let Ok((client, _)) = accepted else { continue };
                let (c, s, upstream) = (c.clone(), s.clone(), upstream.clone());
                tokio::spawn(async move {
                    if let Ok(server) = TcpStream::connect(&upstream).await {
                        tokio::select! {
                            () = relay(client, server, c) => {}
                            () = s.cancelled() => {}
                        }
                    }
                });
            }
        });
        Ok(Proxy {
            port,
            counters,
            stop,
        })
    }

    /// `database_url` with its host and port replaced by the proxy's, as a
    /// keyword/value connection string, in plain text: the proxy counts
    /// the protocol's bursts, which TLS records would hide (the store's
    /// default, like libpq's, is to encrypt when the server offers it).
    pub fn database_url(&self, database_url: &str) -> anyhow::Result<String> {
        let config: tokio_postgres::Config = without_tls(database_url)
            .parse()
            .context("parsing the database url")?;
        let mut out = format!("host=127.0.0.1 port={} sslmode=disable", self.port);
        if let Some(user) = config.get_user() {
            out.push_str(&format!(" user='{}'", quote(user)));
        }
        if let Some(password) = config.get_password() {
            out.push_str(&format!(
                " password='{}'",
                quote(&String::from_utf8_lossy(password))
            ));
        }
        if let Some(dbname) = config.get_dbname() {
            out.push_str(&format!(" dbname='{}'", quote(dbname)));
        }
        Ok(out)
    }

    pub fn sample(&self) -> WireSample {
        WireSample {
            round_trips: self.counters.round_trips.load(Ordering::Relaxed),
            bytes_sent: self.counters.bytes_sent.load(Ordering::Relaxed),
            bytes_received: self.counters.bytes_received.load(Ordering::Relaxed),
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// `host:port` of the first host of a database url.
/// A `postgres://` URL without its TLS parameters (tokio-postgres cannot
/// read libpq's `verify-ca`/`verify-full`, and the proxy speaks plain text).
fn without_tls(database_url: &str) -> String {
    let parts: Vec<&str> = database_url
        .split(['?', '&'])
        .filter(|part| !part.starts_with("sslmode=") && !part.starts_with("sslrootcert="))
        .collect();
    match parts.split_first() {
        Some((head, [])) => (*head).to_owned(),
        Some((head, rest)) => format!("{head}?{}", rest.join("&")),
        None => String::new(),
    }
}

pub fn upstream(database_url: &str) -> anyhow::Result<String> {
    let config: tokio_postgres::Config = without_tls(database_url)
        .parse()
        .context("parsing the database url")?;
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(host)) => host.clone(),
        _ => anyhow::bail!("the round-trip pass needs a TCP database host"),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    Ok(format!("{host}:{port}"))
}

fn quote(value: &str) -> String {
    value.replace('\\', "\\\\").replace('\'', "\\'")
}

/// Copies both ways; a client read that follows a server write is a new
/// round trip.
async fn relay(client: TcpStream, server: TcpStream, counters: Arc<Counters>) {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    // True once the server has answered since the client last sent.
    let answered = Arc::new(AtomicBool::new(true));
    let to_server = {
        let (counters, answered) = (counters.clone(), answered.clone());
        async move {
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let n = match client_read.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                if answered.swap(false, Ordering::AcqRel) {
                    counters.round_trips.fetch_add(1, Ordering::Relaxed);
                    if std::env::var_os("BENCH_WIRE_TRACE").is_some() {
                        let text: String = buf[..n]
                            .iter()
                            .map(|&b| {
                                if b.is_ascii_graphic() || b == b' ' {
                                    b as char
                                } else {
                                    '.'
                                }
                            })
                            .collect();
                        eprintln!("RT {}", &text[..text.len().min(160)]);
                    }
                }
                counters.bytes_sent.fetch_add(n as u64, Ordering::Relaxed);
                if server_write.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
        }
    };
    let to_client = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match server_read.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            counters
                .bytes_received
                .fetch_add(n as u64, Ordering::Relaxed);
            if client_write.write_all(&buf[..n]).await.is_err() {
                return;
            }
            answered.store(true, Ordering::Release);
        }
    };
    tokio::select! {
        () = to_server => {}
        () = to_client => {}
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_proxy_url_drops_tls_parameters_and_keeps_the_rest() {
        assert_eq!(
            super::without_tls(
                "postgres://u@db/app?sslmode=verify-full&sslrootcert=/ca.pem&application_name=x"
            ),
            "postgres://u@db/app?application_name=x"
        );
        assert_eq!(
            super::without_tls("postgres://u@db/app?sslmode=require"),
            "postgres://u@db/app"
        );
        assert_eq!(
            super::without_tls("postgres://u@db/app"),
            "postgres://u@db/app"
        );
        assert_eq!(
            super::upstream("postgres://u@127.0.0.1:5432/app?sslmode=verify-full").unwrap(),
            "127.0.0.1:5432"
        );
    }
}
