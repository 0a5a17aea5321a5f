//! tokio's IO traits over a file: the borrowed `Cursor` (`File::cursor`)
//! and the owned `AsyncFile` (`File::into_async`), which moves into a
//! task. Reads, writes and seeks against the blocking calls and a
//! `Vec<u8>` model; a read resumed across polls without parked state
//! starts its IO once.

use std::io::SeekFrom;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use backing::{FaultyBacking, MemBacking};
use foliocache::future::AsyncFile;
use foliocache::{Cache, File};
use proptest::prelude::*;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncSeekExt, AsyncWriteExt, ReadBuf};

use super::{check_cache, counting_waker, test_cache, Counting, P};
use crate::common::nonzero_bytes;
use test_support::cache::faulty_file;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap()
}

/// A file of `pages` pages of bytes from `seed`, through a cache of 16
/// pages without readahead, whose backing takes `latency` a read.
fn slow_file(
    pages: u64,
    seed: u64,
    latency: Duration,
) -> (Cache, File, Arc<FaultyBacking<MemBacking>>, Vec<u8>) {
    let c = test_cache(16).no_readahead().build();
    let data = nonzero_bytes((pages * P) as usize, seed);
    let (f, b) = faulty_file(&c, &data);
    b.set_read_latency(latency);
    (c, f, b, data)
}

/// `AsyncFile` moves into a spawned task (`Send + 'static`).
fn assert_task_handle<T: Send + 'static>() {}

#[test]
fn tokio_copy_from_one_owned_handle_into_another_in_a_spawned_task() {
    assert_task_handle::<AsyncFile>();
    let c = test_cache(32).build();
    let data = nonzero_bytes(50 * P as usize + 321, 41);
    let (src, _sb) = faulty_file(&c, &data);
    let (dst, db) = faulty_file(&c, &[]);
    let keep = dst.clone();
    let rt = runtime();
    let copied = rt
        .block_on(async move {
            tokio::spawn(async move {
                let mut from = src.into_async();
                let mut to = dst.into_async();
                let n = tokio::io::copy(&mut from, &mut to).await?;
                to.shutdown().await?;
                to.file().sync_data_async().await?;
                Ok::<_, std::io::Error>(n)
            })
            .await
        })
        .unwrap()
        .unwrap();
    assert_eq!(copied, data.len() as u64);
    assert_eq!(keep.len(), data.len() as u64);
    let mut back = vec![0u8; data.len()];
    keep.read_exact_at(&mut back, 0).unwrap();
    assert!(back == data, "the copy's bytes");
    assert!(
        db.inner().contents().unwrap() == data,
        "synced to the backing"
    );
    check_cache(&c, &keep, 51);
}

#[test]
fn write_all_then_read_to_end_round_trips_through_both_handles() {
    let c = test_cache(16).build();
    let (f, _b) = faulty_file(&c, &[]);
    let data = nonzero_bytes(20 * P as usize + 77, 42);
    let rt = runtime();
    let f2 = f.clone();
    let d2 = data.clone();
    let back = rt.spawn(async move {
        let mut a = f2.into_async();
        a.write_all(&d2).await?;
        assert_eq!(a.position(), d2.len() as u64);
        a.flush().await?;
        a.rewind().await?;
        let mut back = Vec::new();
        a.read_to_end(&mut back).await?;
        Ok::<_, std::io::Error>(back)
    });
    let back = rt.block_on(back).unwrap().unwrap();
    assert!(back == data, "AsyncFile: write_all then read_to_end");
    // The borrowed cursor, over what the owned handle wrote.
    rt.block_on(async {
        let mut cur = f.cursor(5);
        cur.write_all(b"cursor").await.unwrap();
        cur.seek(SeekFrom::Start(0)).await.unwrap();
        let mut all = Vec::new();
        cur.read_to_end(&mut all).await.unwrap();
        let mut want = data.clone();
        want[5..11].copy_from_slice(b"cursor");
        assert!(all == want, "Cursor: write_all then read_to_end");
    });
    check_cache(&c, &f, 21);
}

#[test]
fn seek_write_read_at_partial_pages_of_an_evicted_file() {
    let (c, f, _b, data) = slow_file(12, 43, Duration::from_millis(1));
    let mut want = data.clone();
    let rt = runtime();
    let mut a = f.clone().into_async();
    rt.block_on(async {
        // Each write covers pages in part, not cached: read first.
        for (at, len) in [
            (P + 100, 50usize),
            (3 * P - 7, 20),
            (8 * P + 4000, P as usize),
        ] {
            let bytes = nonzero_bytes(len, at);
            let pos = a.seek(SeekFrom::Start(at)).await.unwrap();
            assert_eq!(pos, at);
            a.write_all(&bytes).await.unwrap();
            want[at as usize..][..len].copy_from_slice(&bytes);
            a.seek(SeekFrom::Current(-(len as i64) - 10)).await.unwrap();
            let mut got = vec![0u8; len + 30];
            a.read_exact(&mut got).await.unwrap();
            assert_eq!(&got[..], &want[at as usize - 10..][..len + 30]);
        }
        // Past the end: the file grows, with a hole of zeros.
        let end = a.seek(SeekFrom::End(5)).await.unwrap();
        a.write_all(b"tail").await.unwrap();
        want.resize(end as usize, 0);
        want.extend_from_slice(b"tail");
        a.rewind().await.unwrap();
        let mut all = Vec::new();
        a.read_to_end(&mut all).await.unwrap();
        assert!(all == want, "the file after the writes");
    });
    drop(a);
    check_cache(&c, &f, 13);
}

#[test]
fn an_owned_handles_read_resumed_across_polls_starts_its_io_once() {
    let (c, f, b, data) = slow_file(8, 44, Duration::from_millis(50));
    let reads = b.stats().reads;
    let misses = c.stats().misses;
    let mut a = AsyncFile::new(f.clone(), 3 * P + 9);
    let counting = Arc::new(Counting::default());
    let waker = counting_waker(&counting);
    let mut cx = Context::from_waker(&waker);
    let mut buf = [0u8; 64];
    // Polled three times while the page's read is in flight (each poll
    // rebuilds the read around the buffer; the second and third find the
    // folio locked and wait), then once it was woken.
    let mut pending = 0;
    let n = loop {
        let seen = counting.wakes();
        let mut rb = ReadBuf::new(&mut buf);
        match Pin::new(&mut a).poll_read(&mut cx, &mut rb) {
            Poll::Ready(r) => {
                r.unwrap();
                break rb.filled().len();
            }
            Poll::Pending if pending < 3 => pending += 1,
            Poll::Pending => {
                pending += 1;
                counting.wait_past(seen);
            }
        }
    };
    assert!(pending >= 3, "the read waited across polls: {pending}");
    assert!(n > 0);
    assert_eq!(&buf[..n], &data[3 * P as usize + 9..][..n]);
    assert_eq!(a.position(), 3 * P + 9 + n as u64);
    assert_eq!(b.stats().reads - reads, 1, "one read of the backing");
    let s = c.stats();
    assert_eq!(s.misses - misses, 1, "one miss: {s:?}");
    drop(a);
    check_cache(&c, &f, 8);
}

#[test]
fn a_write_that_fails_midway_counts_the_pieces_written_before() {
    // Pieces of 2 pages (a cache of 16); the last piece's partial page
    // cannot be read.
    let (c, f, b, data) = slow_file(8, 46, Duration::from_millis(1));
    b.fail_reads_in(5 * P, P, libc::EIO);
    let bytes = nonzero_bytes(5 * P as usize, 47);
    let mut a = AsyncFile::new(f.clone(), 100);
    let rt = runtime();
    let err = rt.block_on(a.write_all(&bytes)).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    assert_eq!(a.position(), 4 * P, "the pieces before the failing one");
    b.clear_read_ranges();
    let mut got = vec![0u8; 5 * P as usize];
    f.read_exact_at(&mut got, 0).unwrap();
    assert_eq!(&got[..100], &data[..100]);
    assert!(got[100..4 * P as usize] == bytes[..4 * P as usize - 100]);
    assert!(got[4 * P as usize..] == data[4 * P as usize..5 * P as usize]);
    drop(a);
    check_cache(&c, &f, 8);
}

/// One step of the model test.
#[derive(Debug, Clone)]
enum Step {
    Seek(u64),
    Write(usize, u8),
    Read(usize),
}

fn step() -> impl Strategy<Value = Step> {
    let span = 6 * P;
    prop_oneof![
        (0..span).prop_map(Step::Seek),
        (1..2 * P as usize, any::<u8>()).prop_map(|(n, b)| Step::Write(n, b)),
        (1..2 * P as usize).prop_map(Step::Read),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn an_owned_handle_agrees_with_a_vec_model(
        steps in proptest::collection::vec(step(), 1..24),
        evict in any::<bool>(),
    ) {
        let c = test_cache(8).build();
        let init = nonzero_bytes(3 * P as usize + 5, 45);
        let (f, _b) = faulty_file(&c, &init);
        let mut model = init.clone();
        let mut pos = 0usize;
        let mut a = f.clone().into_async();
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        for s in steps {
            match s {
                Step::Seek(to) => {
                    pos = to as usize;
                    let got = rt.block_on(a.seek(SeekFrom::Start(to))).unwrap();
                    prop_assert_eq!(got, to);
                }
                Step::Write(n, byte) => {
                    let bytes: Vec<u8> = (0..n).map(|i| byte.wrapping_add(i as u8)).collect();
                    rt.block_on(a.write_all(&bytes)).unwrap();
                    if model.len() < pos + n {
                        model.resize(pos + n, 0);
                    }
                    model[pos..pos + n].copy_from_slice(&bytes);
                    pos += n;
                }
                Step::Read(n) => {
                    let mut got = vec![0u8; n];
                    let k = rt.block_on(a.read(&mut got)).unwrap();
                    let want = &model[pos.min(model.len())..(pos + n).min(model.len())];
                    prop_assert!(k <= want.len());
                    prop_assert!(k > 0 || want.is_empty());
                    prop_assert_eq!(&got[..k], &want[..k]);
                    pos += k;
                }
            }
            prop_assert_eq!(a.position(), pos as u64);
            if evict {
                f.sync_data().unwrap();
                f.discard().unwrap();
            }
        }
        prop_assert_eq!(f.len(), model.len() as u64);
        let mut all = vec![0u8; model.len()];
        f.read_exact_at(&mut all, 0).unwrap();
        prop_assert!(all == model);
    }
}

#[test]
fn docs_async_md_opens_with_the_example() {
    let doc = include_str!("../../../../../docs/async.md");
    let example = include_str!("../../../examples/async_tasks.rs");
    let code: String = example
        .lines()
        .skip_while(|l| l.starts_with("//!"))
        .skip_while(|l| l.is_empty())
        .map(|l| format!("{l}\n"))
        .collect();
    let at = doc
        .find("```rust\n")
        .expect("a rust block in docs/async.md");
    assert!(
        doc[at + "```rust\n".len()..].starts_with(&code),
        "docs/async.md's first code block is examples/async_tasks.rs"
    );
    assert!(doc[..at].lines().count() < 12, "the example comes first");
}
