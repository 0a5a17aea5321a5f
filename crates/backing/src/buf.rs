//! Block-aligned IO buffers.
//!
//! `O_DIRECT` moves data straight between the device and the caller's memory,
//! so the kernel insists that buffer addresses, buffer lengths and file
//! offsets are multiples of the device's logical block size. We fix one unit
//! for all of them, [`BLOCK`] (4 KiB, the page size, which covers every
//! logical block size seen in practice), and make alignment a property of a
//! type: an [`IoBufMut`] or [`IoBuf`] can only be built from aligned memory,
//! checked once in its constructor, so the IO paths never check again.
//!
//! ```text
//!   address  0x7f..000  0x7f..1000  0x7f..2000
//!            |  BLOCK   |  BLOCK    |            IoBufMut { len = 2 * BLOCK }
//!            ^ multiple of 4096     ^ len multiple of 4096
//! ```
//!
//! Memory normally comes from the cache's folio arena
//! ([`IoBufMut::from_raw_parts`]); [`AlignedBuf`] is an owned, heap-allocated
//! aligned buffer for everyone else (tests, tools, benchmarks).
//!
//! Empty buffers (length 0) are accepted at any address: they move no data.

use std::alloc::{self, Layout};
use std::error::Error;
use std::fmt;
use std::io;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

use crate::BLOCK;

/// What every buffer type of this module has alike, from its start
/// address and length (`|b| (ADDR, LEN)`): `len`, `is_empty` (and, with
/// `blocks`, the number of [`BLOCK`]s) and `Debug` (the address and the
/// length, never the bytes).
macro_rules! buffer_basics {
    ($t:ident $(<$lt:lifetime>)?, |$b:ident| ($addr:expr, $len:expr) $(, $blocks:ident)?) => {
        impl $t$(<$lt>)? {
            /// The buffer's length in bytes (a multiple of [`BLOCK`]).
            pub fn len(&self) -> usize {
                let $b = self;
                $len
            }

            /// Whether the buffer is empty.
            pub fn is_empty(&self) -> bool {
                self.len() == 0
            }

            $(
                /// The number of [`BLOCK`]s in the buffer.
                pub fn $blocks(&self) -> usize {
                    self.len() / BLOCK
                }
            )?
        }

        impl fmt::Debug for $t$(<$lt>)? {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let $b = self;
                f.debug_struct(stringify!($t))
                    .field("addr", &$addr)
                    .field("len", &$len)
                    .finish()
            }
        }
    };
}

/// Which quantity was not a multiple of [`BLOCK`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum MisalignedKind {
    /// A buffer's start address.
    Address,
    /// A buffer's length, or a length of a file range.
    Length,
    /// A file offset.
    Offset,
}

/// A buffer address, buffer length or file offset that is not a multiple of
/// [`BLOCK`].
///
/// Returned by the buffer constructors, and carried inside the
/// [`io::Error`] (kind [`io::ErrorKind::InvalidInput`]) that the IO calls
/// return for a misaligned offset or range: `err.get_ref()` then downcasts to
/// `Misaligned`.
///
/// ```
/// use foliocache_backing::{AlignedBuf, IoBufMut, MisalignedKind, BLOCK};
///
/// let mut mem = AlignedBuf::zeroed(2 * BLOCK)?;
/// // One byte past an aligned address is misaligned.
/// let err = IoBufMut::new(&mut mem[1..BLOCK + 1]).unwrap_err();
/// assert_eq!(err.kind(), MisalignedKind::Address);
/// let io: std::io::Error = err.into();
/// assert_eq!(io.kind(), std::io::ErrorKind::InvalidInput);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Misaligned {
    kind: MisalignedKind,
    value: u64,
}

impl Misaligned {
    /// An error saying that `value`, a quantity of the given kind, is not a
    /// multiple of [`BLOCK`]. For implementors of [`Backing`](crate::Backing)
    /// outside this crate; [`check_io_range`](crate::check_io_range) builds
    /// these for you.
    pub fn new(kind: MisalignedKind, value: u64) -> Self {
        Misaligned { kind, value }
    }

    /// Which quantity was misaligned.
    pub fn kind(&self) -> MisalignedKind {
        self.kind
    }

    /// The misaligned value (an address, a length or an offset, in bytes).
    pub fn value(&self) -> u64 {
        self.value
    }
}

impl fmt::Display for Misaligned {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            MisalignedKind::Address => write!(
                f,
                "buffer address {:#x} is not a multiple of BLOCK ({BLOCK} bytes): \
                 take IO buffers from the folio arena or allocate them with AlignedBuf",
                self.value
            ),
            MisalignedKind::Length => write!(
                f,
                "length {} is not a multiple of BLOCK ({BLOCK} bytes): \
                 round it up to whole blocks",
                self.value
            ),
            MisalignedKind::Offset => write!(
                f,
                "file offset {} is not a multiple of BLOCK ({BLOCK} bytes): \
                 block IO starts at a block boundary; round the offset down",
                self.value
            ),
        }
    }
}

impl Error for Misaligned {}

impl From<Misaligned> for io::Error {
    fn from(m: Misaligned) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidInput, m)
    }
}

/// Checks an address and a length for [`BLOCK`] alignment. Empty buffers
/// pass at any address.
fn check(addr: usize, len: usize) -> Result<(), Misaligned> {
    if len == 0 {
        return Ok(());
    }
    if !addr.is_multiple_of(BLOCK) {
        return Err(Misaligned::new(MisalignedKind::Address, addr as u64));
    }
    if !len.is_multiple_of(BLOCK) {
        return Err(Misaligned::new(MisalignedKind::Length, len as u64));
    }
    Ok(())
}

/// A mutable, [`BLOCK`]-aligned buffer that a read may fill: a `&'a mut [u8]`
/// whose address and length are multiples of [`BLOCK`].
///
/// It dereferences to `[u8]`, so it reads and writes like the slice it wraps.
///
/// ```
/// use foliocache_backing::{AlignedBuf, IoBufMut, BLOCK};
///
/// let mut mem = AlignedBuf::zeroed(2 * BLOCK)?;
/// let mut buf = IoBufMut::new(&mut mem)?;
/// buf[0] = 7;
/// let (first, second) = buf.split_at(BLOCK).unwrap();
/// assert_eq!((first.len(), second.len()), (BLOCK, BLOCK));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct IoBufMut<'a> {
    buf: &'a mut [u8],
}

buffer_basics!(IoBufMut<'_>, |b| (b.buf.as_ptr(), b.buf.len()), blocks);

impl<'a> IoBufMut<'a> {
    /// Wraps `buf` after checking that its address and length are multiples
    /// of [`BLOCK`] (an empty slice passes at any address).
    ///
    /// # Errors
    /// [`Misaligned`] naming the address or the length that is off.
    pub fn new(buf: &'a mut [u8]) -> Result<Self, Misaligned> {
        check(buf.as_ptr() as usize, buf.len())?;
        Ok(IoBufMut { buf })
    }

    /// Wraps `len` bytes at `ptr`, typically memory of an arena that is not
    /// reachable through a slice, after checking alignment.
    ///
    /// When `len` is 0 the pointer is not used and an empty buffer is
    /// returned.
    ///
    /// # Safety
    /// When `len > 0`: `ptr` must be non-null and valid for reads and writes
    /// of `len` bytes for all of `'a`, within one allocation, and nothing
    /// else may read or write that memory while the returned buffer (or
    /// anything derived from it) is alive, exactly as for
    /// [`std::slice::from_raw_parts_mut`]. The bytes need not be
    /// initialised if the buffer is only handed to a read that fills it and
    /// only the bytes the read reports are looked at afterwards; reading
    /// uninitialised bytes through the slice is undefined behaviour, so
    /// zero arena memory before its first use if in doubt.
    ///
    /// # Errors
    /// [`Misaligned`] if `ptr` or `len` is not a multiple of [`BLOCK`].
    pub unsafe fn from_raw_parts(ptr: *mut u8, len: usize) -> Result<Self, Misaligned> {
        if len == 0 {
            return Ok(IoBufMut { buf: &mut [] });
        }
        check(ptr as usize, len)?;
        // SAFETY: the caller guarantees that `ptr` is non-null, valid for
        // reads and writes of `len` bytes for `'a` and not aliased (this
        // function's `# Safety`); alignment of `u8` is 1.
        let buf = unsafe { std::slice::from_raw_parts_mut(ptr, len) };
        Ok(IoBufMut { buf })
    }

    /// The wrapped slice, for the full lifetime `'a`.
    pub fn into_inner(self) -> &'a mut [u8] {
        self.buf
    }

    /// A shorter-lived `IoBufMut` over the same memory, so the buffer can be
    /// handed to a read and used again afterwards.
    pub fn reborrow(&mut self) -> IoBufMut<'_> {
        IoBufMut { buf: self.buf }
    }

    /// A read-only view of the same memory, for a write.
    pub fn as_io_buf(&self) -> IoBuf<'_> {
        IoBuf { buf: self.buf }
    }

    /// Splits into `[0, mid)` and `[mid, len)`, both still aligned.
    ///
    /// Returns `None` when `mid` is past the end or not a multiple of
    /// [`BLOCK`]. It consumes `self` either way; split a
    /// [`reborrow`](Self::reborrow) to keep the whole buffer usable.
    pub fn split_at(self, mid: usize) -> Option<(IoBufMut<'a>, IoBufMut<'a>)> {
        if mid > self.buf.len() || !mid.is_multiple_of(BLOCK) {
            return None;
        }
        let (a, b) = self.buf.split_at_mut(mid);
        Some((IoBufMut { buf: a }, IoBufMut { buf: b }))
    }
}

impl Deref for IoBufMut<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.buf
    }
}

impl DerefMut for IoBufMut<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.buf
    }
}

impl AsRef<[u8]> for IoBufMut<'_> {
    fn as_ref(&self) -> &[u8] {
        self.buf
    }
}

impl AsMut<[u8]> for IoBufMut<'_> {
    fn as_mut(&mut self) -> &mut [u8] {
        self.buf
    }
}

impl<'a> TryFrom<&'a mut [u8]> for IoBufMut<'a> {
    type Error = Misaligned;
    fn try_from(buf: &'a mut [u8]) -> Result<Self, Misaligned> {
        IoBufMut::new(buf)
    }
}

/// A read-only, [`BLOCK`]-aligned buffer that a write sends: a `&'a [u8]`
/// whose address and length are multiples of [`BLOCK`]. It is `Copy`, like
/// the slice it wraps.
///
/// ```
/// use foliocache_backing::{AlignedBuf, IoBuf, BLOCK};
///
/// let mem = AlignedBuf::zeroed(BLOCK)?;
/// let buf = IoBuf::new(&mem)?;
/// assert_eq!(buf.len(), BLOCK);
/// assert!(IoBuf::new(&mem[..100]).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy)]
pub struct IoBuf<'a> {
    buf: &'a [u8],
}

buffer_basics!(IoBuf<'_>, |b| (b.buf.as_ptr(), b.buf.len()), blocks);

impl<'a> IoBuf<'a> {
    /// Wraps `buf` after checking that its address and length are multiples
    /// of [`BLOCK`] (an empty slice passes at any address).
    ///
    /// # Errors
    /// [`Misaligned`] naming the address or the length that is off.
    pub fn new(buf: &'a [u8]) -> Result<Self, Misaligned> {
        check(buf.as_ptr() as usize, buf.len())?;
        Ok(IoBuf { buf })
    }

    /// Wraps `len` bytes at `ptr` after checking alignment. When `len` is 0
    /// the pointer is not used.
    ///
    /// # Safety
    /// When `len > 0`: `ptr` must be non-null, valid for reads of `len`
    /// initialised bytes for all of `'a`, within one allocation, and nothing
    /// may write that memory while the returned buffer is alive, exactly as
    /// for [`std::slice::from_raw_parts`].
    ///
    /// # Errors
    /// [`Misaligned`] if `ptr` or `len` is not a multiple of [`BLOCK`].
    pub unsafe fn from_raw_parts(ptr: *const u8, len: usize) -> Result<Self, Misaligned> {
        if len == 0 {
            return Ok(IoBuf { buf: &[] });
        }
        check(ptr as usize, len)?;
        // SAFETY: the caller guarantees that `ptr` is non-null, valid for
        // reads of `len` initialised bytes for `'a` and not written
        // meanwhile (this function's `# Safety`).
        let buf = unsafe { std::slice::from_raw_parts(ptr, len) };
        Ok(IoBuf { buf })
    }

    /// The wrapped slice, for the full lifetime `'a`.
    pub fn into_inner(self) -> &'a [u8] {
        self.buf
    }

    /// Splits into `[0, mid)` and `[mid, len)`, both still aligned; `None`
    /// when `mid` is past the end or not a multiple of [`BLOCK`].
    pub fn split_at(self, mid: usize) -> Option<(IoBuf<'a>, IoBuf<'a>)> {
        if mid > self.buf.len() || !mid.is_multiple_of(BLOCK) {
            return None;
        }
        let (a, b) = self.buf.split_at(mid);
        Some((IoBuf { buf: a }, IoBuf { buf: b }))
    }
}

impl Deref for IoBuf<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.buf
    }
}

impl AsRef<[u8]> for IoBuf<'_> {
    fn as_ref(&self) -> &[u8] {
        self.buf
    }
}

impl<'a> TryFrom<&'a [u8]> for IoBuf<'a> {
    type Error = Misaligned;
    fn try_from(buf: &'a [u8]) -> Result<Self, Misaligned> {
        IoBuf::new(buf)
    }
}

impl<'a> From<IoBufMut<'a>> for IoBuf<'a> {
    fn from(b: IoBufMut<'a>) -> IoBuf<'a> {
        IoBuf { buf: b.buf }
    }
}

/// An owned, zero-initialised, [`BLOCK`]-aligned heap buffer: the memory to
/// give [`IoBufMut`]/[`IoBuf`] when there is no folio arena (tests, tools,
/// benchmarks). It dereferences to `[u8]`.
///
/// ```
/// use foliocache_backing::{AlignedBuf, Backing, IoBuf, IoBufMut, MemBacking, BLOCK};
///
/// let mem = MemBacking::new();
/// let mut data = AlignedBuf::zeroed(BLOCK)?;
/// data.fill(0xab);
/// mem.write_blocks(&[data.io_buf()], 0)?;
///
/// let mut back = AlignedBuf::zeroed(BLOCK)?;
/// assert_eq!(mem.read_blocks(&mut [back.io_buf_mut()], 0)?, BLOCK);
/// assert_eq!(&back[..], &data[..]);
/// # Ok::<(), std::io::Error>(())
/// ```
///
/// It is `Send` and `Sync` as its [`RawBuf`] is: it owns its allocation
/// exclusively, like `Vec<u8>`, and shared access hands out only `&[u8]`.
pub struct AlignedBuf {
    /// The allocation (exclusively this buffer's: `RawBuf::new`'s
    /// contract), freed on drop.
    raw: RawBuf,
}

buffer_basics!(AlignedBuf, |b| (b.raw.as_ptr(), b.raw.len()));

impl AlignedBuf {
    /// Allocates `len` zeroed bytes aligned to [`BLOCK`].
    ///
    /// # Errors
    /// - [`io::ErrorKind::InvalidInput`] (carrying [`Misaligned`]) if `len`
    ///   is not a multiple of [`BLOCK`], or if it is too large to allocate
    ///   at all (over `isize::MAX`).
    /// - [`io::ErrorKind::OutOfMemory`] if the allocator refuses.
    pub fn zeroed(len: usize) -> io::Result<Self> {
        if !len.is_multiple_of(BLOCK) {
            return Err(Misaligned::new(MisalignedKind::Length, len as u64).into());
        }
        if len == 0 {
            return Ok(AlignedBuf {
                raw: RawBuf::empty(),
            });
        }
        let layout = Layout::from_size_align(len, BLOCK).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("AlignedBuf of {len} bytes is larger than any allocation can be"),
            )
        })?;
        // SAFETY: `layout` has a non-zero size (len > 0 was checked above).
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::OutOfMemory,
                format!("could not allocate an aligned buffer of {len} bytes"),
            )
        })?;
        // SAFETY: a fresh allocation of `len` bytes, exclusively this
        // buffer's until `drop` frees it.
        let raw = unsafe { RawBuf::new(ptr.as_ptr(), len) }?;
        Ok(AlignedBuf { raw })
    }

    /// The whole buffer as an [`IoBufMut`] for a read (alignment holds by
    /// construction, so this cannot fail).
    pub fn io_buf_mut(&mut self) -> IoBufMut<'_> {
        IoBufMut { buf: self }
    }

    /// The whole buffer as an [`IoBuf`] for a write.
    pub fn io_buf(&self) -> IoBuf<'_> {
        IoBuf { buf: self }
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: the address is valid for `len` initialised (zeroed at
        // allocation) bytes that `self` owns; for `len == 0` it is a
        // dangling, non-null, aligned pointer, which an empty slice allows.
        unsafe { std::slice::from_raw_parts(self.raw.as_ptr(), self.raw.len()) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, and `&mut self` makes the borrow unique.
        unsafe { std::slice::from_raw_parts_mut(self.raw.as_ptr(), self.raw.len()) }
    }
}

impl AsRef<[u8]> for AlignedBuf {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl AsMut<[u8]> for AlignedBuf {
    fn as_mut(&mut self) -> &mut [u8] {
        self
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if self.raw.is_empty() {
            return;
        }
        // SAFETY: allocated in `zeroed` with exactly this size and alignment
        // (which `from_size_align` accepted then), and freed only here.
        unsafe {
            alloc::dealloc(
                self.raw.as_ptr(),
                Layout::from_size_align_unchecked(self.raw.len(), BLOCK),
            )
        }
    }
}

/// A [`BLOCK`]-aligned buffer given by address and length, for asynchronous
/// reads ([`aio::ReadOp`](crate::aio::ReadOp)) whose buffers live in memory
/// that no Rust borrow can describe across threads and time: the folio
/// arena, while a read fills a folio on the engine's thread.
///
/// A `RawBuf` is neither `Clone` nor `Copy`: each one stands for exclusive
/// access to its bytes, and an op owns its buffers until it completes.
///
/// ```
/// use foliocache_backing::{AlignedBuf, RawBuf, BLOCK};
///
/// let mut mem = AlignedBuf::zeroed(2 * BLOCK)?;
/// // SAFETY: `mem` outlives `raw` and is not used while `raw` lives.
/// let mut raw = unsafe { RawBuf::new(mem.as_mut_ptr(), mem.len()) }?;
/// raw.io_buf_mut()[0] = 7;
/// assert_eq!(raw.len(), 2 * BLOCK);
/// drop(raw);
/// assert_eq!(mem[0], 7);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct RawBuf {
    ptr: NonNull<u8>,
    len: usize,
}

buffer_basics!(RawBuf, |b| (b.ptr.as_ptr(), b.len));

// SAFETY: a `RawBuf` stands for exclusive access to its bytes (the contract
// of `RawBuf::new`), like a `&mut [u8]`, which is `Send`.
unsafe impl Send for RawBuf {}
// SAFETY: through `&RawBuf` only the address and length can be read, never
// the bytes, so sharing it between threads shares nothing else.
unsafe impl Sync for RawBuf {}

impl RawBuf {
    /// Wraps `len` bytes at `ptr` after checking that both are multiples of
    /// [`BLOCK`]. When `len` is 0 the pointer is not used and an empty
    /// buffer is returned.
    ///
    /// # Safety
    /// When `len > 0`: `ptr` must be non-null and valid for reads and writes
    /// of `len` bytes, within one allocation, from now until the `RawBuf`
    /// is dropped, and **nothing else may read or write those bytes in that
    /// time**. A `RawBuf` put into a [`ReadOp`](crate::aio::ReadOp) that is
    /// submitted to an [`IoEngine`](crate::aio::IoEngine) lives until just
    /// before the op's callback is called: the engine (the kernel, for
    /// io_uring) writes into the memory from another thread until then, so
    /// keep the memory allocated and untouched until the callback runs.
    /// The bytes need not be initialised if they are only handed to a read,
    /// which fills every byte (with data, or zeros past end of file) when it
    /// succeeds; as with [`IoBufMut::from_raw_parts`], zero the memory
    /// before its first use if anything may look at it after a failed read.
    ///
    /// # Errors
    /// [`Misaligned`] if `ptr` or `len` is not a multiple of [`BLOCK`].
    pub unsafe fn new(ptr: *mut u8, len: usize) -> Result<Self, Misaligned> {
        if len == 0 {
            return Ok(RawBuf::empty());
        }
        check(ptr as usize, len)?;
        let ptr = NonNull::new(ptr).ok_or(Misaligned::new(MisalignedKind::Address, 0))?;
        Ok(RawBuf { ptr, len })
    }

    /// An empty buffer: its address dangling (but aligned), never used.
    fn empty() -> RawBuf {
        RawBuf {
            ptr: NonNull::dangling(),
            len: 0,
        }
    }

    /// The buffer's start address (dangling, but aligned, when empty).
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The memory as an [`IoBufMut`], borrowed from `self`, e.g. to hand it
    /// to [`Backing::read_blocks`](crate::Backing::read_blocks).
    pub fn io_buf_mut(&mut self) -> IoBufMut<'_> {
        if self.len == 0 {
            return IoBufMut { buf: &mut [] };
        }
        // SAFETY: `RawBuf::new`'s contract: `ptr` is valid for reads and
        // writes of `len` bytes and exclusively ours while `self` lives;
        // the `&mut self` borrow makes this slice the only access for its
        // lifetime. Address and length were checked for alignment in `new`.
        let buf = unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) };
        IoBufMut { buf }
    }
}

/// The bytes of an [`IoBuf`] that an engine's write op carries across
/// threads: its address and length without its lifetime
/// (`IoEngine::write_all`, which waits for the op, keeps the borrow).
/// Crate-private: only that call makes one.
pub(crate) struct RawSrc {
    ptr: *const u8,
    len: usize,
}

// SAFETY: a `RawSrc` stands for shared, read-only access to bytes nobody
// writes while it lives (the contract of `RawSrc::new`), like a `&[u8]`,
// which is `Send`.
unsafe impl Send for RawSrc {}

impl RawSrc {
    /// The bytes of `buf`, for an op that outlives the borrow's lifetime.
    ///
    /// # Safety
    /// The bytes must stay valid, and nothing may write them, until the
    /// `RawSrc` is dropped.
    pub(crate) unsafe fn new(buf: IoBuf<'_>) -> RawSrc {
        RawSrc {
            ptr: buf.buf.as_ptr(),
            len: buf.buf.len(),
        }
    }

    /// The start address.
    pub(crate) fn as_ptr(&self) -> *const u8 {
        self.ptr
    }

    /// The length in bytes (a multiple of [`BLOCK`]).
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The bytes as an [`IoBuf`] again, borrowed from `self`, e.g. for
    /// [`Backing::write_blocks`](crate::Backing::write_blocks).
    pub(crate) fn io_buf(&self) -> IoBuf<'_> {
        if self.len == 0 {
            return IoBuf { buf: &[] };
        }
        // SAFETY: `RawSrc::new`'s contract: the bytes are valid and
        // unwritten while `self` lives, which the borrow of `self` spans;
        // they came from an `IoBuf`, so they are initialised and aligned.
        let buf = unsafe { std::slice::from_raw_parts(self.ptr, self.len) };
        IoBuf { buf }
    }
}
