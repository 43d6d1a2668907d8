//! The safetensors header checked entry by entry before the safetensors crate reads it, so that every
//! problem is reported with the tensor it concerns: keys given twice (JSON parsers keep the last), fields
//! other than `dtype`, `shape` and `data_offsets`, unknown dtypes, sizes that disagree with the offsets, and
//! data sections with overlaps, holes, missing or trailing bytes.

use std::fmt;
use std::marker::PhantomData;

use safetensors::Dtype;
use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use crate::error::{one_line, CaseError};

/// The fields of a tensor's header entry.
const FIELDS: [&str; 3] = ["dtype", "shape", "data_offsets"];

/// The key of the string-to-string metadata.
const METADATA: &str = "__metadata__";

/// A JSON object's entries in file order, duplicates kept so that they can be reported.
struct Entries<V>(Vec<(String, V)>);

impl<'de, V: Deserialize<'de>> Deserialize<'de> for Entries<V> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Vis<V>(PhantomData<V>);
        impl<'de, V: Deserialize<'de>> Visitor<'de> for Vis<V> {
            type Value = Entries<V>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Entries<V>, A::Error> {
                let mut out = Vec::new();
                while let Some(kv) = map.next_entry::<String, V>()? {
                    out.push(kv);
                }
                Ok(Entries(out))
            }
        }
        d.deserialize_map(Vis(PhantomData))
    }
}

/// One value of the header's top-level object: an object (its entries in order) or something else.
enum Entry {
    Object(Vec<(String, Value)>),
    Other(&'static str),
}

impl<'de> Deserialize<'de> for Entry {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Vis;
        impl<'de> Visitor<'de> for Vis {
            type Value = Entry;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_bool<E>(self, _: bool) -> Result<Entry, E> {
                Ok(Entry::Other("a boolean"))
            }
            fn visit_i64<E>(self, _: i64) -> Result<Entry, E> {
                Ok(Entry::Other("a number"))
            }
            fn visit_u64<E>(self, _: u64) -> Result<Entry, E> {
                Ok(Entry::Other("a number"))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Entry, E> {
                Ok(Entry::Other("a number"))
            }
            fn visit_str<E>(self, _: &str) -> Result<Entry, E> {
                Ok(Entry::Other("a string"))
            }
            fn visit_unit<E>(self) -> Result<Entry, E> {
                Ok(Entry::Other("null"))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Entry, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Entry::Other("an array"))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Entry, A::Error> {
                let mut out = Vec::new();
                while let Some(kv) = map.next_entry::<String, Value>()? {
                    out.push(kv);
                }
                Ok(Entry::Object(out))
            }
        }
        d.deserialize_any(Vis)
    }
}

/// A tensor's entry, checked on its own.
struct Info {
    name: String,
    begin: usize,
    end: usize,
}

/// A JSON value for a message: compact, and cut short when long.
fn short(v: &Value) -> String {
    let s = one_line(&v.to_string());
    if s.chars().count() <= 60 {
        s
    } else {
        format!("{}...", s.chars().take(57).collect::<String>())
    }
}

fn malformed(msg: String) -> CaseError {
    CaseError::Malformed(msg)
}

/// Check a header (the JSON after the length field) against a data section of `data_len` bytes.
pub(super) fn check_header(header: &[u8], data_len: usize) -> Result<(), CaseError> {
    let Entries(entries) = serde_json::from_slice::<Entries<Entry>>(header)
        .map_err(|e| malformed(format!("header is not a JSON object: {}", one_line(&e.to_string()))))?;
    let mut seen = std::collections::HashSet::with_capacity(entries.len());
    let mut infos = Vec::with_capacity(entries.len());
    for (name, entry) in &entries {
        let shown = one_line(name);
        if !seen.insert(name.as_str()) {
            return Err(malformed(if name == METADATA {
                format!("`{METADATA}` appears twice in the header")
            } else {
                format!("tensor `{shown}` appears twice in the header")
            }));
        }
        if name == METADATA {
            check_metadata(entry)?;
            continue;
        }
        let fields = match entry {
            Entry::Object(f) => f,
            Entry::Other(what) => {
                return Err(malformed(format!(
                    "tensor `{shown}`: header entry is {what}, not an object of dtype, shape and data_offsets"
                )))
            }
        };
        infos.push(check_tensor(&shown, fields)?);
    }

    // The data section: the tensors' byte ranges in order, from 0, without overlaps or holes, to its end.
    infos.sort_by(|a, b| (a.begin, a.end, &a.name).cmp(&(b.begin, b.end, &b.name)));
    let mut pos = 0usize;
    let mut prev: Option<&Info> = None;
    for t in &infos {
        if t.begin < pos {
            let p = prev.expect("pos > 0 only after a tensor");
            return Err(malformed(format!(
                "tensor `{}`: data_offsets [{}, {}] overlap those of tensor `{}` [{}, {}]",
                t.name, t.begin, t.end, p.name, p.begin, p.end
            )));
        }
        if t.begin > pos {
            return Err(malformed(format!(
                "bytes {pos}..{} of the data section belong to no tensor (the next is tensor `{}` at [{}, {}])",
                t.begin, t.name, t.begin, t.end
            )));
        }
        pos = t.end;
        prev = Some(t);
    }
    if pos > data_len {
        let last = &prev.expect("pos > 0 only after a tensor").name;
        return Err(CaseError::Truncated(format!(
            "tensor data needs {pos} bytes (tensor `{last}` ends there), file has {data_len}"
        )));
    }
    if pos < data_len {
        return Err(malformed(format!(
            "{} bytes after the last tensor's data (tensors cover {pos} of {data_len})",
            data_len - pos
        )));
    }
    Ok(())
}

/// `__metadata__`: null or an object of strings, no key twice.
fn check_metadata(entry: &Entry) -> Result<(), CaseError> {
    let fields = match entry {
        Entry::Object(f) => f,
        Entry::Other("null") => return Ok(()),
        Entry::Other(what) => return Err(malformed(format!("`{METADATA}` is {what}, not an object of strings"))),
    };
    let mut seen = std::collections::HashSet::with_capacity(fields.len());
    for (k, v) in fields {
        if !seen.insert(k.as_str()) {
            return Err(malformed(format!("`{METADATA}` gives `{}` twice", one_line(k))));
        }
        if !v.is_string() {
            return Err(malformed(format!("`{METADATA}` entry `{}` is {}, not a string", one_line(k), short(v))));
        }
    }
    Ok(())
}

/// One tensor's entry: exactly dtype, shape and data_offsets, a known dtype, and a size that fills the
/// offsets' span.
fn check_tensor(name: &str, fields: &[(String, Value)]) -> Result<Info, CaseError> {
    let err = |msg: String| malformed(format!("tensor `{name}`: {msg}"));
    let mut got: [Option<&Value>; 3] = [None; 3];
    for (k, v) in fields {
        let Some(ix) = FIELDS.iter().position(|f| f == k) else {
            return Err(err(format!(
                "unknown field `{}` in its header entry (allowed: dtype, shape, data_offsets)",
                one_line(k)
            )));
        };
        if got[ix].replace(v).is_some() {
            return Err(err(format!("field `{k}` given twice")));
        }
    }
    let field = |ix: usize| got[ix].ok_or_else(|| err(format!("header entry lacks `{}`", FIELDS[ix])));
    let (dtype, shape, offsets) = (field(0)?, field(1)?, field(2)?);

    let dtype: Dtype = match dtype {
        Value::String(_) => serde_json::from_value(dtype.clone()).ok(),
        _ => None,
    }
    .ok_or_else(|| err(format!("dtype {} is not a safetensors dtype", short(dtype))))?;
    let index = |v: &Value| v.as_u64().and_then(|v| usize::try_from(v).ok());
    let shape: Vec<usize> = shape
        .as_array()
        .and_then(|a| a.iter().map(index).collect())
        .ok_or_else(|| err(format!("shape {} is not a list of non-negative integers", short(shape))))?;
    let (begin, end) = match offsets.as_array().map(|a| a.as_slice()) {
        Some([b, e]) => index(b).zip(index(e)),
        _ => None,
    }
    .ok_or_else(|| err(format!("data_offsets {} is not a pair of non-negative integers", short(offsets))))?;
    if end < begin {
        return Err(err(format!("data_offsets [{begin}, {end}] end before they begin")));
    }
    let bits = shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d)).and_then(|n| n.checked_mul(dtype.bitsize()));
    let Some(bits) = bits else {
        return Err(err(format!("shape {shape:?} of {dtype:?} is too large to address")));
    };
    if bits % 8 != 0 {
        return Err(err(format!("shape {shape:?} of {dtype:?} is not a whole number of bytes")));
    }
    if bits / 8 != end - begin {
        return Err(err(format!(
            "shape {shape:?} of {dtype:?} needs {} bytes, data_offsets [{begin}, {end}] hold {}",
            bits / 8,
            end - begin
        )));
    }
    Ok(Info { name: name.to_string(), begin, end })
}
