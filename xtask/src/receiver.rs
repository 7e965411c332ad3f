//! A minimal HTTP receiver for webhook notifications (the pod-alert bench
//! and demo): every POST's JSON body is handed over with its arrival time,
//! and answered 200.

use std::time::Instant;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// Accepts on `listener` until the receiving end is dropped.
pub fn serve(listener: TcpListener) -> mpsc::UnboundedReceiver<(Instant, serde_json::Value)> {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                if let Some(body) = read_one(sock).await {
                    let _ = tx.send((Instant::now(), body));
                }
            });
        }
    });
    rx
}

/// Reads one request, answers 200, returns its JSON body.
async fn read_one(mut sock: TcpStream) -> Option<serde_json::Value> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16384];
    loop {
        let n = sock.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else { continue };
        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
        let length = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse::<usize>().ok())
            .unwrap_or(0);
        if buf.len() < end + 4 + length {
            continue;
        }
        let _ = sock.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok").await;
        return serde_json::from_slice(&buf[end + 4..end + 4 + length]).ok();
    }
}
