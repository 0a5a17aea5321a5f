//! Errors returned by the array.

use std::fmt;

/// What went wrong with an array operation.
///
/// Every variant leaves the array as it was before the call.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The order is above [`MAX_ORDER`](crate::MAX_ORDER); use a smaller one.
    OrderTooLarge {
        /// The order asked for.
        order: u32,
    },
    /// A multi-order entry must start at a multiple of its size; round the
    /// index down to `2^order`.
    Misaligned {
        /// The index given.
        index: u64,
        /// The order given.
        order: u32,
    },
    /// `insert` found the index occupied (by an entry or a reservation).
    Occupied {
        /// The index that was occupied.
        index: u64,
    },
    /// A value entry above [`MAX_VALUE`](crate::MAX_VALUE); values have 62 bits.
    ValueTooLarge {
        /// The value given.
        value: u64,
    },
    /// An item pointer not aligned to 8 bytes; the array needs its low bits.
    MisalignedItem {
        /// The item's address.
        addr: usize,
    },
    /// An index range whose end lies before its start or past `u64::MAX`.
    InvalidRange {
        /// The first index.
        start: u64,
        /// The last index (inclusive), as computed.
        last: u64,
    },
    /// There is no entry at the index (for split).
    NotPresent {
        /// The index.
        index: u64,
    },
    /// A split must go to an order smaller than the entry's own.
    SplitOrder {
        /// The entry's order.
        entry_order: u32,
        /// The order asked for.
        new_order: u32,
    },
    /// The split would need more nodes than one split may build
    /// ([`MAX_SPLIT_NODES`](crate::MAX_SPLIT_NODES)); split in steps.
    SplitTooLarge {
        /// Nodes the split needs.
        nodes: usize,
    },
    /// The cursor's node pool ran short under the lock (the kernel's ENOMEM in
    /// an `xa_state`). Nothing was changed: drop the lock, call
    /// [`Cursor::reserve_nodes`](crate::Cursor::reserve_nodes) with `nodes`,
    /// and retry. The simple API does this loop for you.
    NeedNodes {
        /// How many nodes the operation needs in the pool.
        nodes: usize,
    },
    /// The system allocator refused memory for a node.
    AllocFailed,
    /// A cursor was used with the lock guard of a different array.
    WrongArray,
}

/// Short for `Result<T, foliocache_xarray::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::OrderTooLarge { order } => write!(
                f,
                "order {order} is above the maximum {}; use a smaller order",
                crate::MAX_ORDER
            ),
            Error::Misaligned { index, order } => write!(
                f,
                "index {index} is not aligned to order {order}; round it down to a multiple of 2^{order}"
            ),
            Error::Occupied { index } => write!(f, "index {index} is already occupied"),
            Error::ValueTooLarge { value } => write!(
                f,
                "value {value} does not fit a value entry (at most {})",
                crate::MAX_VALUE
            ),
            Error::MisalignedItem { addr } => {
                write!(f, "item pointer {addr:#x} is not 8-byte aligned")
            }
            Error::InvalidRange { start, last } => {
                write!(f, "invalid index range {start}..={last}")
            }
            Error::NotPresent { index } => write!(f, "no entry at index {index}"),
            Error::SplitOrder { entry_order, new_order } => write!(
                f,
                "cannot split an order-{entry_order} entry into order-{new_order} pieces; \
                 the new order must be smaller"
            ),
            Error::SplitTooLarge { nodes } => write!(
                f,
                "split would build {nodes} nodes, above the limit of {}; split in steps",
                crate::MAX_SPLIT_NODES
            ),
            Error::NeedNodes { nodes } => write!(
                f,
                "the cursor needs {nodes} preallocated nodes; unlock, reserve_nodes({nodes}) and retry"
            ),
            Error::AllocFailed => write!(f, "out of memory allocating an xarray node"),
            Error::WrongArray => write!(f, "cursor used with another array's lock guard"),
        }
    }
}

impl std::error::Error for Error {}

impl From<Error> for std::io::Error {
    fn from(e: Error) -> Self {
        let kind = match e {
            Error::Occupied { .. } => std::io::ErrorKind::AlreadyExists,
            Error::AllocFailed | Error::NeedNodes { .. } => std::io::ErrorKind::OutOfMemory,
            Error::NotPresent { .. } => std::io::ErrorKind::NotFound,
            _ => std::io::ErrorKind::InvalidInput,
        };
        std::io::Error::new(kind, e)
    }
}
