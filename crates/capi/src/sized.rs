//! Structs that C and the library exchange by pointer, each beginning
//! with its size in bytes as the caller's program was compiled with, so
//! that either side may be built against an older or newer header (the
//! kernel's `copy_struct_from_user` convention): the fields both know are
//! exchanged, a field the caller lacks takes its default (zero), and a
//! field the library lacks must be zero (else `E2BIG`). As the kernel's
//! `openat2` and `clone3`, a size above a page is `E2BIG` before anything
//! past the library's own struct is read: a garbage size (an uninitialised
//! field) is an error, not a read of megabytes past the caller's struct.

use std::mem::size_of;
use std::ptr;

use crate::error::{Error, Result};

/// A struct exchanged with C, beginning with its size.
///
/// # Safety
/// The type is `repr(C)`, begins with a `u32` field that holds its size,
/// has no padding, and every bit pattern of its bytes is a valid value
/// (integers only), the default one being all zeros.
pub(crate) unsafe trait SizedStruct: Copy + Default {}

/// The largest struct size accepted (a page, as the kernel's limit for
/// `openat2`'s and `clone3`'s structs); above it, `E2BIG`.
const MAX_SIZE: usize = 4096;

/// Checks a pointer from C and reads the size its struct begins with.
///
/// # Safety
/// A non-null, aligned `p` points to at least 4 readable bytes.
unsafe fn size_at<T: SizedStruct>(p: *const T) -> Result<usize> {
    if p.is_null() {
        return Err(Error::new(
            libc::EFAULT,
            "foliocache: a NULL struct pointer",
        ));
    }
    if !p.is_aligned() {
        return Err(Error::new(
            libc::EINVAL,
            "foliocache: a misaligned struct pointer",
        ));
    }
    // SAFETY: `p` is non-null and aligned, and points to at least the
    // leading `u32` (the caller's promise); `T` begins with it.
    let size = unsafe { p.cast::<u32>().read() } as usize;
    if size < size_of::<u32>() {
        return Err(Error::new(
            libc::EINVAL,
            format!("foliocache: a struct size of {size} bytes (set it to sizeof the struct)"),
        ));
    }
    Ok(size)
}

/// Reads the struct C passed: its first `size` bytes as far as `T` has
/// them, the rest of `T` zero.
///
/// # Safety
/// `src` is NULL, or points to an object of the size its first `u32`
/// says, readable, and not written during the call.
pub(crate) unsafe fn read_in<T: SizedStruct>(src: *const T) -> Result<T> {
    // SAFETY: the caller's promise.
    let size = unsafe { size_at(src) }?;
    let ours = size_of::<T>();
    let mut value = T::default();
    // SAFETY: `src` is readable for `size` bytes (the caller's promise)
    // and `value` is writable for `ours`; the copy takes the smaller;
    // `value` is a local, so they do not overlap; any bytes are a valid
    // `T` (`SizedStruct`).
    unsafe {
        ptr::copy_nonoverlapping(
            src.cast::<u8>(),
            ptr::from_mut(&mut value).cast::<u8>(),
            size.min(ours),
        )
    };
    if size > ours {
        if size > MAX_SIZE {
            return Err(Error::new(
                libc::E2BIG,
                format!("foliocache: a struct size of {size} bytes (more than a page)"),
            ));
        }
        // SAFETY: `src` is readable for `size` bytes (the caller's
        // promise), of which these are the last `size - ours`.
        let tail = unsafe { std::slice::from_raw_parts(src.cast::<u8>().add(ours), size - ours) };
        if tail.iter().any(|&b| b != 0) {
            return Err(Error::new(
                libc::E2BIG,
                "foliocache: the struct sets fields this library does not know (a newer header?)",
            ));
        }
    }
    Ok(value)
}

/// Writes `value` into the struct C passed: as many bytes as both it and
/// `T` have, with the size field set to that count.
///
/// # Safety
/// `dst` is NULL, or points to an object of the size its first `u32`
/// says, writable, and not accessed otherwise during the call.
pub(crate) unsafe fn write_out<T: SizedStruct>(dst: *mut T, mut value: T) -> Result<()> {
    // SAFETY: the caller's promise.
    let size = unsafe { size_at(dst) }?;
    let n = size.min(size_of::<T>());
    // SAFETY: `value` is a `T`, which begins with its `u32` size
    // (`SizedStruct`); `n` fits, being at most `size`, from a `u32`.
    unsafe { ptr::from_mut(&mut value).cast::<u32>().write(n as u32) };
    // SAFETY: `dst` is writable for `size` bytes (the caller's promise)
    // and `value` readable for `size_of::<T>()`; the copy takes the
    // smaller; `value` is a local, so they do not overlap.
    unsafe { ptr::copy_nonoverlapping(ptr::from_ref(&value).cast::<u8>(), dst.cast::<u8>(), n) };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[repr(C)]
    #[derive(Clone, Copy, Default, Debug, PartialEq)]
    struct V2 {
        size: u32,
        a: u32,
        b: u64,
    }

    // SAFETY: `repr(C)`, the size first, integers only, no padding.
    unsafe impl SizedStruct for V2 {}

    // Aligned as `V2`, so that a pointer to it may pass for one.
    #[repr(C, align(8))]
    #[derive(Clone, Copy, Default, Debug, PartialEq)]
    struct V1 {
        size: u32,
        a: u32,
    }

    // SAFETY: `repr(C)`, the size first, integers only, no padding.
    unsafe impl SizedStruct for V1 {}

    #[repr(C)]
    #[derive(Clone, Copy, Default, Debug, PartialEq)]
    struct V3 {
        v2: V2,
        c: u64,
    }

    // SAFETY: `repr(C)`, the size first, integers only, no padding.
    unsafe impl SizedStruct for V3 {}

    #[test]
    fn an_older_caller_gets_defaults() {
        let old = V1 { size: 8, a: 5 };
        // SAFETY: `old` is 8 bytes, as its size says.
        let v: V2 = unsafe { read_in(ptr::from_ref(&old).cast()) }.unwrap();
        assert_eq!(
            v,
            V2 {
                size: 8,
                a: 5,
                b: 0
            }
        );
    }

    #[test]
    fn a_newer_caller_must_leave_new_fields_zero() {
        let mut new = V3 {
            v2: V2 {
                size: 24,
                a: 1,
                b: 2,
            },
            c: 0,
        };
        let p = ptr::from_ref(&new).cast::<V2>();
        // SAFETY: `new` is 24 bytes, as its size says.
        let v = unsafe { read_in(p) }.unwrap();
        assert_eq!(
            v,
            V2 {
                size: 24,
                a: 1,
                b: 2
            }
        );
        new.c = 3;
        let p = ptr::from_ref(&new).cast::<V2>();
        // SAFETY: as above.
        assert_eq!(unsafe { read_in(p) }.unwrap_err().errno, libc::E2BIG);
    }

    #[test]
    fn bad_pointers_and_sizes() {
        // SAFETY: NULL is checked before any access.
        let e = unsafe { read_in::<V2>(ptr::null()) }.unwrap_err();
        assert_eq!(e.errno, libc::EFAULT);
        // SAFETY: as above.
        let e = unsafe { write_out::<V2>(ptr::null_mut(), V2::default()) }.unwrap_err();
        assert_eq!(e.errno, libc::EFAULT);
        let zero = V2::default();
        // SAFETY: `zero` is readable; its size (0) is refused.
        let e = unsafe { read_in(ptr::from_ref(&zero)) }.unwrap_err();
        assert_eq!(e.errno, libc::EINVAL);
        let bytes = [0u64; 4];
        // SAFETY: misalignment is checked before any access.
        let e = unsafe { read_in(bytes.as_ptr().cast::<u8>().add(4).cast::<V2>()) }.unwrap_err();
        assert_eq!(e.errno, libc::EINVAL);
    }

    #[test]
    fn writes_what_fits() {
        let value = V2 {
            size: 0,
            a: 7,
            b: 9,
        };
        let mut old = V1 { size: 8, a: 0 };
        // SAFETY: `old` is 8 writable bytes, as its size says.
        unsafe { write_out(ptr::from_mut(&mut old).cast::<V2>(), value) }.unwrap();
        assert_eq!(old, V1 { size: 8, a: 7 });
        let mut new = V3 {
            v2: V2 {
                size: 24,
                a: 0,
                b: 0,
            },
            c: 42,
        };
        // SAFETY: `new` is 24 writable bytes, as its size says.
        unsafe { write_out(ptr::from_mut(&mut new).cast::<V2>(), value) }.unwrap();
        assert_eq!(
            new,
            V3 {
                v2: V2 {
                    size: 16,
                    a: 7,
                    b: 9
                },
                c: 42
            }
        );
    }
}
