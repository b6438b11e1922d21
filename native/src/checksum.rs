//! A document's content hash (indexer.core.checksums.content_hash, the reference): CRC32 of
//! `#name=value` for each non-NULL field in the order of the names, without the Python
//! strings and the per-layout cache the reference builds for each document.
//!
//! Strings and integers are written here; every other value is written by the reference's
//! `hash_text`, passed in. A document this side cannot read exactly (a name that is not a
//! string, text that is not valid UTF-8) is declined (None) and hashed by the reference,
//! which says what is wrong with it.
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyInt, PyString};

/// content_hash(doc, spaced, hash_text) -> the CRC32, or None (the reference's to hash).
#[pyfunction]
pub fn content_hash(doc: &Bound<'_, PyDict>, spaced: bool, hash_text: &Bound<'_, PyAny>)
                    -> PyResult<Option<u32>> {
    let mut fields = Vec::with_capacity(doc.len());
    for (name, value) in doc.iter() {
        if value.is_none() {
            continue; // NULLs are not hashed
        }
        let Ok(name) = name.cast_into::<PyString>() else { return Ok(None) };
        fields.push((name, value));
    }
    let mut names = Vec::with_capacity(fields.len());
    for (name, _) in &fields {
        let Ok(text) = name.to_str() else { return Ok(None) };
        names.push(text);
    }
    let mut order: Vec<usize> = (0..fields.len()).collect();
    order.sort_unstable_by(|a, b| names[*a].cmp(names[*b])); // UTF-8 order is code point order
    let mut crc = crc32fast::Hasher::new();
    let mut digits = itoa::Buffer::new();
    for i in order {
        crc.update(b"#");
        crc.update(names[i].as_bytes());
        crc.update(b"=");
        let value = &fields[i].1;
        // Exact types only, as the reference: a bool (an int) or a str subclass is hash_text's.
        let text = if value.is_exact_instance_of::<PyString>() {
            value.cast::<PyString>()?.clone()
        } else if value.is_exact_instance_of::<PyInt>() {
            if let Ok(n) = value.extract::<i64>() {
                crc.update(digits.format(n).as_bytes());
                continue;
            }
            value.str()? // beyond 64 bits
        } else {
            hash_text.call1((value, spaced))?.cast_into::<PyString>()?
        };
        let Ok(text) = text.to_str() else { return Ok(None) };
        crc.update(text.as_bytes());
    }
    Ok(Some(crc.finalize()))
}
