//! The version record: what the disk tier keeps of an object's latest
//! version (its `ObjectMeta` and attributes, as a HEAD returned them), so
//! that a restarted store serves the tier's chunks of that version at
//! once instead of waiting for a HEAD (docs/object-store.md, "Restart").
//!
//! ```text
//!   record: path | size u64 | modified (secs i64, nanos u32) | e_tag | version
//!           | attributes: count u32, each (kind u8 [, name], value)
//!   string: len u32 | UTF-8 bytes       optional string: 0, or 1 and a string
//! ```
//! Little-endian. The record sits in one slot of the tier (its key
//! [`record_key`](crate::disk::record_key), its checksum the slot's); an
//! empty record is a tombstone (no version known). A record that does not
//! decode, or names another path, is no record.

use super::object_store;
use std::borrow::Cow;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use object_store::path::Path;
use object_store::{Attribute, AttributeValue, Attributes, ObjectMeta};

use crate::disk::CHUNK;

/// The kinds of attribute a record holds, in order; `Metadata` is
/// [`METADATA`].
const KINDS: [Attribute; 6] = [
    Attribute::ContentDisposition,
    Attribute::ContentEncoding,
    Attribute::ContentLanguage,
    Attribute::ContentType,
    Attribute::CacheControl,
    Attribute::StorageClass,
];
/// The kind byte of `Attribute::Metadata` (its name follows).
const METADATA: u8 = KINDS.len() as u8;

/// The record of `meta` with `attributes`; `None` if it cannot be one
/// (an attribute this version of the crate does not know, or more than a
/// chunk's bytes): the object is then looked up by a HEAD after a
/// restart, as without a record.
pub(crate) fn encode(meta: &ObjectMeta, attributes: &Attributes) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    put_str(&mut out, meta.location.as_ref());
    out.extend_from_slice(&meta.size.to_le_bytes());
    out.extend_from_slice(&meta.last_modified.timestamp().to_le_bytes());
    out.extend_from_slice(&meta.last_modified.timestamp_subsec_nanos().to_le_bytes());
    put_opt(&mut out, meta.e_tag.as_deref());
    put_opt(&mut out, meta.version.as_deref());
    out.extend_from_slice(&(attributes.len() as u32).to_le_bytes());
    for (k, v) in attributes {
        match k {
            Attribute::Metadata(name) => {
                out.push(METADATA);
                put_str(&mut out, name);
            }
            k => out.push(KINDS.iter().position(|x| x == k)? as u8),
        }
        put_str(&mut out, v.as_ref());
    }
    (out.len() <= CHUNK).then_some(out)
}

/// The version and attributes `data` records for `path`, if it is a
/// record of that path.
pub(crate) fn decode(path: &Path, data: &[u8]) -> Option<(ObjectMeta, Attributes)> {
    let mut r = Reader(data);
    if r.str()? != path.as_ref() {
        return None;
    }
    let size = r.u64()?;
    let secs = r.u64()? as i64;
    let nanos = u32::from_le_bytes(r.take(4)?.try_into().ok()?);
    let since = Duration::new(secs.unsigned_abs(), 0);
    let whole: SystemTime = match secs < 0 {
        true => UNIX_EPOCH.checked_sub(since)?,
        false => UNIX_EPOCH.checked_add(since)?,
    };
    let at = whole.checked_add(Duration::from_nanos(u64::from(nanos.min(999_999_999))))?;
    let e_tag = r.opt()?;
    let version = r.opt()?;
    let mut attributes = Attributes::new();
    for _ in 0..u32::from_le_bytes(r.take(4)?.try_into().ok()?) {
        let kind = *r.take(1)?.first()?;
        let k = match kind {
            METADATA => Attribute::Metadata(Cow::Owned(r.str()?.to_owned())),
            k => KINDS.get(k as usize)?.clone(),
        };
        attributes.insert(k, AttributeValue::from(r.str()?.to_owned()));
    }
    if !r.0.is_empty() {
        return None;
    }
    let meta = ObjectMeta {
        location: path.clone(),
        last_modified: at.into(),
        size,
        e_tag,
        version,
    };
    Some((meta, attributes))
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u32).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_opt(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        Some(s) => {
            out.push(1);
            put_str(out, s);
        }
        None => out.push(0),
    }
}

/// The bytes of a record not read yet.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }

    fn str(&mut self) -> Option<&'a str> {
        let n = u32::from_le_bytes(self.take(4)?.try_into().ok()?) as usize;
        std::str::from_utf8(self.take(n)?).ok()
    }

    fn opt(&mut self) -> Option<Option<String>> {
        match *self.take(1)?.first()? {
            0 => Some(None),
            1 => Some(Some(self.str()?.to_owned())),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record decodes to what was encoded, attributes included; another
    /// path's, a cut one or a longer one is no record.
    #[test]
    fn a_record_round_trips_and_checks_its_path() {
        let path = Path::from("a/b.sst");
        let meta = ObjectMeta {
            location: path.clone(),
            last_modified: (UNIX_EPOCH + Duration::new(1_700_000_000, 123_456_789)).into(),
            size: 12_345,
            e_tag: Some("\"abc\"".into()),
            version: None,
        };
        let mut attributes = Attributes::new();
        attributes.insert(Attribute::ContentType, "text/plain".into());
        attributes.insert(Attribute::Metadata("k".into()), "v".into());
        let data = encode(&meta, &attributes).unwrap();
        let (m, a) = decode(&path, &data).unwrap();
        assert_eq!(m, meta);
        assert_eq!(a, attributes);
        assert!(decode(&Path::from("a/c.sst"), &data).is_none());
        assert!(decode(&path, &data[..data.len() - 1]).is_none());
        let mut longer = data.clone();
        longer.push(0);
        assert!(decode(&path, &longer).is_none());
        assert!(decode(&path, &[]).is_none(), "a tombstone");
    }
}
