//! The Redis engine's own timing of its lease sweep: the
//! `toolmesh_redis_command_duration_seconds{op="sweep"}` histogram on the
//! registry's admin port (`--admin-listen`). The embedded engine has none.

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// Most bytes of `/metrics` read.
const MAX_BYTES: u64 = 16 << 20;

/// The sweep histogram's sum (seconds) and count.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Sweeps {
    pub(super) seconds: f64,
    pub(super) count: u64,
}

/// `GET /metrics` from `admin` (`HOST:PORT`), over HTTP/1.0.
pub(super) async fn scrape(admin: &str) -> anyhow::Result<String> {
    let mut stream = tokio::net::TcpStream::connect(admin).await?;
    stream
        .write_all(format!("GET /metrics HTTP/1.0\r\nHost: {admin}\r\n\r\n").as_bytes())
        .await?;
    let mut answer = Vec::new();
    stream.take(MAX_BYTES).read_to_end(&mut answer).await?;
    let answer = String::from_utf8_lossy(&answer);
    let (head, body) = answer
        .split_once("\r\n\r\n")
        .ok_or_else(|| anyhow::anyhow!("{admin}/metrics answered no HTTP message"))?;
    anyhow::ensure!(
        head.lines().next().is_some_and(|l| l.contains(" 200")),
        "{admin}/metrics answered {}",
        head.lines().next().unwrap_or_default()
    );
    Ok(body.to_owned())
}

/// The sweep histogram in a Prometheus text exposition, if it has one.
pub(super) fn sweeps(exposition: &str) -> Option<Sweeps> {
    let value = |suffix: &str| {
        let name = format!("toolmesh_redis_command_duration_seconds_{suffix}{{");
        exposition
            .lines()
            .filter(|line| line.starts_with(&name) && line.contains(r#"op="sweep""#))
            .find_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
    };
    let seconds = value("sum")?;
    let count = value("count")?;
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    Some(Sweeps {
        seconds,
        count: count as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sweep_series_is_read_and_others_ignored() {
        let text = "\
# TYPE toolmesh_redis_command_duration_seconds histogram
toolmesh_redis_command_duration_seconds_sum{op=\"heartbeat\"} 9.5
toolmesh_redis_command_duration_seconds_count{op=\"heartbeat\"} 900
toolmesh_redis_command_duration_seconds_bucket{le=\"0.001\",op=\"sweep\"} 3
toolmesh_redis_command_duration_seconds_sum{op=\"sweep\"} 0.25
toolmesh_redis_command_duration_seconds_count{op=\"sweep\"} 12
";
        assert_eq!(
            sweeps(text),
            Some(Sweeps {
                seconds: 0.25,
                count: 12
            })
        );
        assert_eq!(sweeps("toolmesh_build_info 1\n"), None);
    }
}
