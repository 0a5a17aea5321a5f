//! Tasks sharing one file through the cache on tokio (the example that
//! opens `docs/async.md`): one task writes the file through an owned
//! handle (`File::into_async`, tokio's `AsyncWrite`), others read it at
//! once through an `Arc<File>` (`read_exact_at_async`), and a last one
//! streams it whole (`AsyncRead`) with its own handle.
//!
//! ```text
//! cargo run -p foliocache --example async_tasks
//! ```

use std::io;
use std::sync::Arc;

use foliocache::Cache;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::main]
async fn main() -> io::Result<()> {
    let path = std::env::temp_dir().join(format!("foliocache-tasks-{}", std::process::id()));
    let cache = Cache::builder().capacity(8 << 20).build()?;
    let mut opts = cache.open_options();
    opts.read(true).write(true).create(true);
    let file = opts.open(&path)?;

    // An owned handle moves into a task, as a `tokio::fs::File` does. A
    // clone shares the file's readahead state and error report (as a
    // duplicated descriptor); `file` stays usable here.
    let mut w = file.clone().into_async();
    tokio::spawn(async move {
        for i in 0..256u32 {
            w.write_all(&[i as u8; 4096]).await?;
        }
        // `flush` makes nothing durable: `sync_data` does.
        w.file().sync_data_async().await
    })
    .await??;

    // Many readers of one handle: an `Arc<File>`. Each read that misses
    // (all of them, the cache emptied of the file first) waits for its IO
    // without a thread.
    file.discard()?;
    let shared = Arc::new(file);
    let mut readers = Vec::new();
    for i in 0..8u64 {
        let f = Arc::clone(&shared);
        readers.push(tokio::spawn(async move {
            let mut page = vec![0u8; 4096];
            f.read_exact_at_async(&mut page, i * 31 * 4096).await?;
            assert!(page.iter().all(|&b| b == (i * 31) as u8));
            Ok::<_, io::Error>(())
        }));
    }
    for r in readers {
        r.await??;
    }

    // An independent stream opens the file again: its own readahead state,
    // so its sequential reads get their own window.
    let mut stream = opts.open(&path)?.into_async();
    let mut all = Vec::new();
    stream.read_to_end(&mut all).await?;
    assert_eq!(all.len(), 256 * 4096);

    let s = cache.stats();
    println!(
        "hits {} misses {} miss waits {}",
        s.hits, s.misses, s.miss_latency.count
    );
    std::fs::remove_file(&path)
}
