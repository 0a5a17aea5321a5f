//! The guardian (`CacheBuilder::guardian`, docs/design.md section 12): a
//! writer killed at a random moment, with its writes in the cache and
//! never synced, loses none of the bytes its writes accepted. The writer
//! is this test binary run again as a child (`writer_child`, ignored when
//! the suite runs), which says on its stdout each write it starts and each
//! that returned; the test kills it with SIGKILL at a random moment, then
//! checks the file against a model of the writes that returned.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use foliocache::{Guardian, WriteFlags};
use rand::{Rng, SeedableRng};
use test_support::cache::TestCache;
use test_support::TempPath;

/// Byte `o` of the file as write generation `g` writes it.
fn pattern(o: u64, g: u64) -> u8 {
    (o.wrapping_mul(31) ^ g.wrapping_mul(0x9e37_79b9)) as u8 | 1
}

/// The environment that makes `writer_child` write, and where.
const ENV_FILE: &str = "FOLIOCACHE_TEST_GUARDIAN_FILE";
const ENV_SEED: &str = "FOLIOCACHE_TEST_GUARDIAN_SEED";

/// One write: generation, offset, length.
type Write1 = (u64, u64, u64);

/// The writes of seed `seed`, in order: appends of 1 byte to 96 KiB and
/// overwrites of earlier bytes, some inside one page, some across folios.
fn writes(seed: u64) -> impl Iterator<Item = Write1> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut end = 0u64;
    (1u64..).map(move |g| {
        let len = match rng.gen_range(0..4) {
            0 => rng.gen_range(1..4096),
            1 => 4096,
            _ => rng.gen_range(1..96 << 10),
        };
        let off = if end == 0 || rng.gen_bool(0.6) {
            end
        } else {
            rng.gen_range(0..end)
        };
        end = end.max(off + len);
        (g, off, len)
    })
}

/// The writer: writes through a cache with a guardian, never syncs, until
/// killed; a third of its writes are uncached (`WriteFlags::DONTCACHE`). Each write is announced (`start G`) and confirmed (`done G`).
#[test]
#[ignore = "the child process of `a_killed_writer_loses_no_accepted_byte`"]
fn writer_child() {
    let (Ok(path), Ok(seed)) = (std::env::var(ENV_FILE), std::env::var(ENV_SEED)) else {
        return;
    };
    let cache = TestCache::bytes(32 << 20).guardian(Guardian::Child).build();
    let f = cache
        .open_options()
        .read(true)
        .write(true)
        .create(true)
        .open(&path)
        .expect("opening the file");
    let mut out = std::io::stdout().lock();
    let mut buf = Vec::new();
    for (g, off, len) in writes(seed.parse().expect("a seed")) {
        buf.clear();
        buf.extend((off..off + len).map(|o| pattern(o, g)));
        writeln!(out, "start {g}").unwrap();
        out.flush().unwrap();
        // Every third write uncached: its folios leave the cache when
        // the writeback it started ends, and must stay unsaved until then.
        let flags = if g % 3 == 0 {
            WriteFlags::DONTCACHE
        } else {
            WriteFlags::NONE
        };
        f.write_at_flags(&buf, off, flags).expect("a write");
        writeln!(out, "done {g}").unwrap();
        out.flush().unwrap();
    }
}

/// Kills the writer of `seed` after `after` of its writes returned (and
/// whatever it did since), waits for its guardian's writeback, and checks
/// every byte.
fn kill_and_check(seed: u64, after: u64) {
    let file = TempPath::new("guardian-killed");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "guardian::writer_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ENV_FILE, &file.path)
        .env(ENV_SEED, seed.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("starting the writer");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let (mut done, mut started) = (0u64, 0u64);
    while done < after {
        let Some(Ok(line)) = lines.next() else {
            panic!("the writer ended before {after} writes");
        };
        if let Some(g) = line.strip_prefix("start ") {
            started = g.parse().unwrap();
        } else if let Some(g) = line.strip_prefix("done ") {
            done = g.parse().unwrap();
        }
    }
    child.kill().unwrap();
    // What it said before it died.
    for line in lines.map_while(Result::ok) {
        if let Some(g) = line.strip_prefix("start ") {
            started = g.parse().unwrap();
        } else if let Some(g) = line.strip_prefix("done ") {
            done = g.parse().unwrap();
        }
    }
    let status = child.wait().unwrap();
    assert!(!status.success(), "the writer was killed: {status}");

    // The model: every write that returned; the one in flight may have
    // landed in part, whole, or not at all.
    let mut model: Vec<u8> = Vec::new();
    let mut in_flight = None;
    for (g, off, len) in writes(seed).take(started as usize) {
        if g > done {
            in_flight = Some((g, off, len));
            break;
        }
        let end = (off + len) as usize;
        if model.len() < end {
            model.resize(end, 0);
        }
        for o in off..off + len {
            model[o as usize] = pattern(o, g);
        }
    }
    // The guardian writes back once the writer is gone: wait until the
    // file holds the model (bounded).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = std::fs::read(&file.path).unwrap_or_default();
        match check(&got, &model, in_flight) {
            Ok(()) => return,
            Err(why) if Instant::now() > deadline => {
                panic!("seed {seed}, killed after {after} writes (done {done}, started {started}): {why}")
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// `got` against `model`: equal, but where the write in flight may have
/// put its own bytes, and past the model's end, where only it may have.
fn check(got: &[u8], model: &[u8], in_flight: Option<Write1>) -> Result<(), String> {
    let may_be = |o: usize, b: u8| {
        in_flight.is_some_and(|(g, off, len)| {
            (off..off + len).contains(&(o as u64)) && b == pattern(o as u64, g)
        })
    };
    if got.len() < model.len() {
        return Err(format!(
            "{} bytes, the writes made {}",
            got.len(),
            model.len()
        ));
    }
    if let Some(o) = (0..got.len()).find(|&o| {
        let want = model.get(o).copied().unwrap_or(0);
        got[o] != want
            && !may_be(o, got[o])
            && !(o >= model.len() && got[o] == 0 && in_flight.is_some())
    }) {
        return Err(format!(
            "byte {o}: {:#x}, want {:#x}",
            got[o],
            model.get(o).copied().unwrap_or(0)
        ));
    }
    if got.len() > model.len() {
        let Some((_, off, len)) = in_flight else {
            return Err(format!(
                "{} bytes, the writes made {}",
                got.len(),
                model.len()
            ));
        };
        if got.len() as u64 > off + len {
            return Err(format!("{} bytes, past the write in flight", got.len()));
        }
    }
    Ok(())
}

/// Killed at random moments: after 1 to 400 writes (some before the
/// flusher wrote anything back, some while it does).
#[test]
fn a_killed_writer_loses_no_accepted_byte() {
    let kills: u64 = test_support::env_or("FOLIOCACHE_TEST_GUARDIAN_KILLS", 12);
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x6a7d);
    for _ in 0..kills {
        let seed = rng.gen();
        let after = rng.gen_range(1..400);
        kill_and_check(seed, after);
    }
}
