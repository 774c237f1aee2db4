//! Slow and hostile connections, over real sockets: each limit closes what it should within its
//! timeout while the server goes on serving everyone else.

use std::time::{Duration, Instant};

use loom_server::AuthMode;
use loom_store::ProxyMode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::support::{start_with, Server};

/// A server whose connection limits are short enough to test.
async fn server(max_connections: usize) -> Server {
    start_with(AuthMode::None, ProxyMode::Fit, |c| {
        c.limits.header_timeout = Duration::from_millis(600);
        c.limits.body_timeout = Duration::from_millis(600);
        c.limits.max_body_bytes = 4_096;
        c.limits.max_connections = max_connections;
    })
    .await
}

async fn connect(s: &Server) -> TcpStream {
    TcpStream::connect(s.url.trim_start_matches("http://"))
        .await
        .unwrap()
}

/// Everything the server sends until it closes the connection, and how long that took; `None`
/// when it was still open after `within`.
async fn until_closed(stream: &mut TcpStream, within: Duration) -> Option<(String, Duration)> {
    let started = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0_u8; 4096];
    loop {
        let left = within.checked_sub(started.elapsed())?;
        match tokio::time::timeout(left, stream.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0) | Err(_)) => {
                return Some((
                    String::from_utf8_lossy(&got).into_owned(),
                    started.elapsed(),
                ))
            }
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// The server still answers a well-behaved client.
async fn serves_others(s: &Server) {
    let r = s
        .http
        .get(format!("{}/healthz", s.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn a_header_sent_slowly_or_never_finished_is_closed_within_the_header_timeout() {
    let s = server(64).await;
    // One byte of the request line every 200 ms: never a whole header within 600 ms.
    let mut slow = connect(&s).await;
    let dripping = tokio::spawn(async move {
        for b in b"GET /healthz HTTP/1.1\r\nHost: x\r\n" {
            if slow.write_all(&[*b]).await.is_err() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        false
    });
    // A half-sent header, then silence.
    let mut half = connect(&s).await;
    half.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Ty")
        .await
        .unwrap();
    serves_others(&s).await;
    let (_, took) = until_closed(&mut half, Duration::from_secs(5))
        .await
        .expect("a half-sent header is closed");
    assert!(took < Duration::from_secs(3), "{took:?}");
    let cut = tokio::time::timeout(Duration::from_secs(10), dripping)
        .await
        .unwrap()
        .unwrap();
    assert!(
        cut,
        "the dripping client was cut off before it finished its header"
    );
    serves_others(&s).await;
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_within_the_header_timeout() {
    let s = server(64).await;
    let mut idle = connect(&s).await;
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let (reply, took) = until_closed(&mut idle, Duration::from_secs(5))
        .await
        .expect("an idle connection is closed");
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    assert!(took < Duration::from_secs(3), "{took:?}");
}

#[tokio::test]
async fn a_body_that_never_arrives_gets_a_408_within_the_body_timeout() {
    let s = server(64).await;
    let mut stalled = connect(&s).await;
    stalled
        .write_all(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"model\":",
        )
        .await
        .unwrap();
    serves_others(&s).await;
    let (reply, took) = until_closed(&mut stalled, Duration::from_secs(5))
        .await
        .expect("the connection is closed after the 408");
    assert!(reply.starts_with("HTTP/1.1 408"), "{reply}");
    // In the provider's shape, on the provider's route.
    assert!(reply.contains("\"error\""), "{reply}");
    assert!(reply.contains("body_timeout_ms"), "{reply}");
    assert!(took < Duration::from_secs(3), "{took:?}");
    assert!(s.store().sessions().unwrap().is_empty(), "nothing stored");
}

#[tokio::test]
async fn a_declared_body_over_the_limit_gets_its_413_before_any_of_it_is_sent() {
    let s = server(64).await;
    for path in ["/v1/messages", "/loom/v1/sessions"] {
        let mut big = connect(&s).await;
        big.write_all(
            format!(
                "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 40000000\r\n\r\n"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
        let (reply, took) = until_closed(&mut big, Duration::from_secs(5))
            .await
            .expect("answered and closed without waiting for the body");
        assert!(reply.starts_with("HTTP/1.1 413"), "{path}: {reply}");
        assert!(reply.contains("4096 bytes"), "{path}: {reply}");
        assert!(took < Duration::from_millis(500), "{path}: {took:?}");
    }
    serves_others(&s).await;
}

#[tokio::test]
async fn past_max_connections_a_new_connection_gets_a_503_and_the_others_are_served() {
    let s = start_with(AuthMode::None, ProxyMode::Fit, |c| {
        c.limits.max_connections = 3;
    })
    .await;
    // Three connections held open, each with a request served and kept alive.
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut c = connect(&s).await;
        c.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0_u8; 1024];
        let n = c.read(&mut buf).await.unwrap();
        assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
        held.push(c);
    }
    let mut extra = connect(&s).await;
    extra
        .write_all(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
        .await
        .unwrap();
    let (reply, _) = until_closed(&mut extra, Duration::from_secs(5))
        .await
        .expect("answered and closed");
    assert!(reply.starts_with("HTTP/1.1 503"), "{reply}");
    assert!(
        reply.to_ascii_lowercase().contains("retry-after: 1"),
        "{reply}"
    );
    assert!(reply.contains("max_connections"), "{reply}");
    // The connections already open are still served.
    held[0]
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0_u8; 1024];
    let n = held[0].read(&mut buf).await.unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    // A slot freed is a slot for the next client.
    drop(held.pop());
    tokio::time::sleep(Duration::from_millis(200)).await;
    let metrics = {
        let mut c = connect(&s).await;
        c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        until_closed(&mut c, Duration::from_secs(5))
            .await
            .unwrap()
            .0
    };
    assert!(metrics.starts_with("HTTP/1.1 200"), "{metrics}");
    assert!(
        metrics.contains("loom_connections_refused_total 1"),
        "{metrics}"
    );
}
