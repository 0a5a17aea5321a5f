//! Aligned buffers: what the constructors accept and reject, and how the
//! errors read.

use std::io;

use foliocache_backing::{AlignedBuf, IoBuf, IoBufMut, Misaligned, MisalignedKind, BLOCK};

#[test]
fn aligned_memory_is_accepted() {
    let mut mem = AlignedBuf::zeroed(3 * BLOCK).unwrap();
    assert_eq!(mem.as_ptr() as usize % BLOCK, 0);
    assert!(mem.iter().all(|&b| b == 0));
    let buf = IoBufMut::new(&mut mem[BLOCK..]).unwrap();
    assert_eq!(
        (buf.len(), buf.blocks(), buf.is_empty()),
        (2 * BLOCK, 2, false)
    );
    let ro = IoBuf::new(&mem[..BLOCK]).unwrap();
    assert_eq!(ro.blocks(), 1);
}

#[test]
fn misaligned_address_is_rejected_with_its_value() {
    let mut mem = AlignedBuf::zeroed(2 * BLOCK).unwrap();
    let addr = mem.as_ptr() as u64 + 512;
    let e = IoBufMut::new(&mut mem[512..512 + BLOCK]).unwrap_err();
    assert_eq!((e.kind(), e.value()), (MisalignedKind::Address, addr));
    let e = IoBuf::new(&mem[512..512 + BLOCK]).unwrap_err();
    assert_eq!(e.kind(), MisalignedKind::Address);
    let msg = e.to_string();
    assert!(
        msg.contains("buffer address") && msg.contains("AlignedBuf"),
        "{msg}"
    );
}

#[test]
fn misaligned_length_is_rejected_with_its_value() {
    let mut mem = AlignedBuf::zeroed(2 * BLOCK).unwrap();
    let e = IoBufMut::new(&mut mem[..BLOCK + 1]).unwrap_err();
    assert_eq!(
        (e.kind(), e.value()),
        (MisalignedKind::Length, BLOCK as u64 + 1)
    );
    let e = IoBuf::new(&mem[..100]).unwrap_err();
    assert_eq!((e.kind(), e.value()), (MisalignedKind::Length, 100));
    assert!(e
        .to_string()
        .contains("length 100 is not a multiple of BLOCK (4096 bytes)"));
}

#[test]
fn empty_buffers_are_accepted_anywhere() {
    let mut v = [0u8; 3];
    assert!(IoBufMut::new(&mut v[1..1]).unwrap().is_empty());
    assert!(IoBuf::new(&v[2..2]).unwrap().is_empty());
    assert!(IoBufMut::new(&mut []).is_ok());
}

#[test]
fn misaligned_converts_to_invalid_input_and_downcasts_back() {
    let e = IoBuf::new(&[0u8; 10]).unwrap_err();
    let io: io::Error = e.into();
    assert_eq!(io.kind(), io::ErrorKind::InvalidInput);
    let back = io.get_ref().unwrap().downcast_ref::<Misaligned>().unwrap();
    assert_eq!(*back, e);
    let offset = Misaligned::new(MisalignedKind::Offset, 12);
    assert!(offset.to_string().contains("file offset 12"), "{offset}");
    assert!(
        offset.to_string().contains("round the offset down"),
        "{offset}"
    );
}

#[test]
fn from_raw_parts_checks_alignment() {
    let mut mem = AlignedBuf::zeroed(2 * BLOCK).unwrap();
    let p = mem.as_mut_ptr();
    {
        // SAFETY: `p` points to 2 * BLOCK bytes owned by `mem`, which is not
        // used while `buf` lives (this block).
        let mut buf = unsafe { IoBufMut::from_raw_parts(p, 2 * BLOCK) }.unwrap();
        buf[0] = 42;
        assert_eq!(buf.len(), 2 * BLOCK);
    }
    assert_eq!(mem[0], 42);
    // SAFETY: as above; the range is inside `mem`.
    let e = unsafe { IoBufMut::from_raw_parts(p.add(8), BLOCK) }.unwrap_err();
    assert_eq!(e.kind(), MisalignedKind::Address);
    // SAFETY: as above.
    let e = unsafe { IoBuf::from_raw_parts(p, 10) }.unwrap_err();
    assert_eq!(e.kind(), MisalignedKind::Length);
    // SAFETY: a zero length never touches the pointer, even a null one.
    let empty = unsafe { IoBufMut::from_raw_parts(std::ptr::null_mut(), 0) }.unwrap();
    assert!(empty.is_empty());
    // SAFETY: as above.
    let empty = unsafe { IoBuf::from_raw_parts(std::ptr::null(), 0) }.unwrap();
    assert!(empty.is_empty());
}

#[test]
fn split_at_keeps_alignment() {
    let mut mem = AlignedBuf::zeroed(3 * BLOCK).unwrap();
    let mut buf = mem.io_buf_mut();
    assert!(
        buf.reborrow().split_at(100).is_none(),
        "unaligned split point"
    );
    assert!(buf.reborrow().split_at(4 * BLOCK).is_none(), "past the end");
    let (a, b) = buf.split_at(BLOCK).unwrap();
    assert_eq!((a.len(), b.len()), (BLOCK, 2 * BLOCK));
    let ro: IoBuf<'_> = b.into();
    let (c, d) = ro.split_at(2 * BLOCK).unwrap();
    assert_eq!((c.len(), d.len()), (2 * BLOCK, 0));
}

#[test]
fn aligned_buf_rejects_bad_lengths_without_panic() {
    let e = AlignedBuf::zeroed(100).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    let e = AlignedBuf::zeroed(usize::MAX / BLOCK * BLOCK).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
    let empty = AlignedBuf::zeroed(0).unwrap();
    assert!(empty.is_empty() && empty.io_buf().is_empty());
}

#[test]
fn buffers_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<AlignedBuf>();
    assert_send_sync::<IoBuf<'static>>();
    assert_send_sync::<IoBufMut<'static>>();
}
