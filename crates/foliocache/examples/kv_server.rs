//! An async key-value reader on tokio over foliocache: a TCP server that
//! answers `GET <key>` lines with the key's fixed-size record, read from a
//! file through the cache with `File::read_exact_at_async`, so a miss
//! costs the connection's task a wait, not a thread.
//!
//! Self-contained: it writes a file of records to the system's temporary
//! directory, serves it on a local port, runs clients that check every
//! answer against the file, prints the cache's figures and removes the
//! file.
//!
//! ```text
//! cargo run --release -p foliocache --example kv_server
//! ```

use std::io;
use std::sync::Arc;

use foliocache::{Cache, File};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// Bytes per record.
const RECORD: usize = 256;
/// Records in the file (16 MiB).
const KEYS: u64 = 1 << 16;
/// Client connections, and the keys each asks for.
const CLIENTS: u64 = 16;
const GETS: u64 = 500;

/// Key `k`'s record: its number, then bytes derived from it.
fn record(k: u64) -> Vec<u8> {
    let mut r: Vec<u8> = (0..RECORD as u64)
        .map(|i| (k.wrapping_mul(31).wrapping_add(i * 7) % 251) as u8)
        .collect();
    r[..8].copy_from_slice(&k.to_le_bytes());
    r
}

/// Serves one connection: `GET <key>` per line, answered with the record
/// and a newline, or `ERR <reason>`.
async fn serve(file: Arc<File>, stream: TcpStream) -> io::Result<()> {
    let (rd, mut wr) = stream.into_split();
    let mut lines = BufReader::new(rd).lines();
    let mut rec = vec![0u8; RECORD];
    while let Some(line) = lines.next_line().await? {
        let key = line
            .strip_prefix("GET ")
            .and_then(|k| k.trim().parse::<u64>().ok());
        match key {
            Some(k) if k < KEYS => {
                file.read_exact_at_async(&mut rec, k * RECORD as u64)
                    .await?;
                wr.write_all(&rec).await?;
                wr.write_all(b"\n").await?;
            }
            _ => wr.write_all(b"ERR no such key\n").await?,
        }
    }
    Ok(())
}

/// Accepts connections, each served by a task of its own.
async fn accept(listener: TcpListener, file: Arc<File>) -> io::Result<()> {
    loop {
        let (stream, _) = listener.accept().await?;
        let file = file.clone();
        tokio::spawn(async move {
            if let Err(e) = serve(file, stream).await {
                eprintln!("connection: {e}");
            }
        });
    }
}

/// A client asking for `GETS` keys, checking every record.
async fn client(addr: std::net::SocketAddr, seed: u64) -> io::Result<()> {
    let stream = TcpStream::connect(addr).await?;
    let (rd, mut wr) = stream.into_split();
    let mut rd = BufReader::new(rd);
    let mut got = vec![0u8; RECORD + 1];
    let mut k = seed;
    for _ in 0..GETS {
        k = k
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let key = (k >> 33) % KEYS;
        wr.write_all(format!("GET {key}\n").as_bytes()).await?;
        tokio::io::AsyncReadExt::read_exact(&mut rd, &mut got).await?;
        if got[..RECORD] != record(key)[..] {
            return Err(io::Error::other(format!("wrong record for key {key}")));
        }
    }
    Ok(())
}

#[tokio::main]
async fn main() -> io::Result<()> {
    let path = std::env::temp_dir().join(format!("foliocache-kv-{}.db", std::process::id()));
    let data: Vec<u8> = (0..KEYS).flat_map(record).collect();
    std::fs::write(&path, &data)?;
    let cache = Cache::builder().capacity(8 << 20).build()?;
    let file = Arc::new(cache.open(&path)?);

    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let server = tokio::spawn(accept(listener, file));

    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| tokio::spawn(client(addr, c + 1)))
        .collect();
    let mut result = Ok(());
    for c in clients {
        if let Err(e) = c.await.map_err(io::Error::other).and_then(|r| r) {
            result = Err(e);
        }
    }
    server.abort();
    std::fs::remove_file(&path)?;
    result?;
    let s = cache.stats();
    println!(
        "{} GETs checked; cache: {} hits, {} misses, {} IOs",
        CLIENTS * GETS,
        s.hits,
        s.misses,
        s.io_reads
    );
    Ok(())
}
