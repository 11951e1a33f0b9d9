//! What a server says about itself at the HTTP/2 level, read with a raw
//! `h2` client.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;

/// The `SETTINGS_MAX_CONCURRENT_STREAMS` the server at `addr` advertises
/// (`usize::MAX`: none), read within 5 s of connecting.
pub async fn advertised_max_concurrent_streams(addr: SocketAddr) -> usize {
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (send, connection) = h2::client::Builder::new()
        .handshake::<_, Bytes>(tcp)
        .await
        .expect("HTTP/2 handshake");
    let driver = tokio::spawn(async move {
        let _ = connection.await;
    });
    let send = send.ready().await.expect("ready");
    // usize::MAX until the server's SETTINGS frame has been read; a server
    // that sets no limit leaves it there.
    let mut advertised = send.current_max_send_streams();
    for _ in 0..100 {
        if advertised != usize::MAX {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        advertised = send.current_max_send_streams();
    }
    driver.abort();
    advertised
}
