//! SQLite's memory-mapped reads (`xFetch`, `xUnfetch`) as foliocache pins.
//!
//! # The problem
//! With `PRAGMA mmap_size` above zero, SQLite asks its VFS for a pointer to
//! a page of the database (`xFetch`) instead of copying it out (`xRead`),
//! reads the page in place for as long as it uses it, and gives the
//! pointer back (`xUnfetch`). A [`foliocache::Pinned`] is that loan: the
//! folio's bytes, pinned in the cache, borrowed from the [`File`] (its
//! lifetime is the file's borrow). SQLite holds the pointer across calls,
//! so the pin must live in the VFS's file object, next to the `File` it
//! borrows from.
//!
//! # The mapping, and why it is sound
//! A [`Fetched`] owns the `File` in a `Box` (its address never changes
//! while the box lives, and the box is never moved out or handed out
//! mutably) and the pins taken from it, with their borrow stretched to
//! `'static`. Each pin is kept, under the pointer SQLite got, until
//! `xUnfetch` gives that pointer back (or the file closes): the bytes
//! SQLite reads stay valid and unchanged while it holds the pointer
//! (a pin is a snapshot: a later write of the page goes to a copy of the
//! folio). The pins are dropped before the file: [`Fetched`]'s `Drop`
//! clears them first, and the field order drops them first as well.
//!
//! SQLite may fetch the same page twice (two cursors); each fetch is its
//! own pin, and each unfetch of the pointer drops one.

use std::collections::HashMap;
use std::io;
use std::sync::Mutex;

use foliocache::{File, Pinned};

/// A file and the pins SQLite holds on it (see the module documentation).
pub(crate) struct Fetched {
    /// Pins by the address and offset SQLite got; several for a page
    /// fetched more than once. Declared before `file`: dropped before it.
    pins: Mutex<HashMap<(usize, i64), Vec<Pinned<'static>>>>,
    /// Boxed: the pins borrow it at this address.
    file: Box<File>,
}

impl Fetched {
    /// `file`, with no pins.
    pub(crate) fn new(file: File) -> Fetched {
        Fetched {
            pins: Mutex::default(),
            file: Box::new(file),
        }
    }

    /// The file.
    pub(crate) fn file(&self) -> &File {
        &self.file
    }

    fn pins(&self) -> std::sync::MutexGuard<'_, HashMap<(usize, i64), Vec<Pinned<'static>>>> {
        self.pins.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A pointer to `len` bytes of the file at `offset`, valid until
    /// [`unfetch`](Self::unfetch) of it, or `None` when the file has fewer
    /// bytes there (SQLite then reads with `xRead`).
    ///
    /// # Errors
    /// As [`File::pin`].
    pub(crate) fn fetch(&self, offset: i64, len: usize) -> io::Result<Option<*const u8>> {
        let Ok(at) = u64::try_from(offset) else {
            return Ok(None);
        };
        let pin = self.file.pin(at, len)?;
        if pin.len() < len || len == 0 {
            return Ok(None);
        }
        // SAFETY: the pin borrows `*self.file`, which lives in a box that
        // `Fetched` neither moves out of nor lends mutably, and that is
        // dropped only after every pin in `pins` (cleared by `Drop` first,
        // and declared first); the pin is stored in `pins` and dropped
        // there, never handed out. So the borrow outlives every use of the
        // pin, as `'static` claims for as long as it exists.
        let pin: Pinned<'static> =
            unsafe { std::mem::transmute::<Pinned<'_>, Pinned<'static>>(pin) };
        let ptr = pin.as_ptr();
        self.pins()
            .entry((ptr as usize, offset))
            .or_default()
            .push(pin);
        Ok(Some(ptr))
    }

    /// Drops one pin given out at `offset` as `ptr`; with a null `ptr`,
    /// SQLite's hint that it holds no page (nothing to do: pins go one by
    /// one). Returns whether there was such a pin.
    pub(crate) fn unfetch(&self, offset: i64, ptr: *const u8) -> bool {
        if ptr.is_null() {
            return true;
        }
        let mut pins = self.pins();
        let key = (ptr as usize, offset);
        let Some(v) = pins.get_mut(&key) else {
            return false;
        };
        let pin = v.pop();
        if v.is_empty() {
            pins.remove(&key);
        }
        drop(pins);
        drop(pin);
        true
    }

    /// Pins held now.
    #[cfg(test)]
    pub(crate) fn outstanding(&self) -> usize {
        self.pins().values().map(Vec::len).sum()
    }
}

impl Drop for Fetched {
    fn drop(&mut self) {
        // The pins go before the file they borrow (see `fetch`).
        self.pins
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }
}

#[cfg(test)]
mod tests {
    use super::Fetched;

    fn fetched() -> (foliocache::Cache, Fetched) {
        let cache = foliocache::Cache::builder()
            .capacity(1 << 20)
            .build()
            .unwrap();
        let f = cache.memfile("db", 0).unwrap();
        f.write_all_at(&[7u8; 8192], 0).unwrap();
        (cache, Fetched::new(f))
    }

    #[test]
    fn a_fetched_page_keeps_its_bytes_through_a_write() {
        let (_c, f) = fetched();
        let p = f.fetch(4096, 4096).unwrap().expect("a whole page");
        f.file().write_all_at(&[9u8; 4096], 4096).unwrap();
        // SAFETY: `p` is valid for 4096 bytes until unfetched (`fetch`).
        let bytes = unsafe { std::slice::from_raw_parts(p, 4096) };
        assert!(bytes.iter().all(|&b| b == 7), "the fetched snapshot");
        assert!(f.unfetch(4096, p));
        assert_eq!(f.outstanding(), 0);
    }

    #[test]
    fn a_page_past_the_end_is_declined_and_unknown_pointers_are_refused() {
        let (_c, f) = fetched();
        assert_eq!(f.fetch(8192, 4096).unwrap(), None);
        assert_eq!(f.fetch(-1, 4096).unwrap(), None);
        let p = f.fetch(0, 4096).unwrap().unwrap();
        let q = f.fetch(0, 4096).unwrap().unwrap();
        assert_eq!(f.outstanding(), 2);
        assert!(!f.unfetch(4096, p), "wrong offset");
        assert!(f.unfetch(0, p));
        assert!(f.unfetch(0, q));
        assert!(!f.unfetch(0, p), "given back already");
        // Dropped with pins held: they go first.
        let _ = f.fetch(0, 4096).unwrap().unwrap();
    }
}
