//! indexer's native per-batch path (indexer.core.native): a slice of one table's Debezium
//! messages (JSON, with or without schemas) to the documents indexer.core.documents would
//! write for them, without a Python object per row or per value.
//!
//! The Python modules are the reference. This side takes only what it can do exactly as they
//! do, and declines (None) every message that is in any way unusual: a delete, a message
//! with another schema than the table's accepted one, a float, an escape it cannot reproduce, a key that is not one
//! integer, a version out of range, a row of another layout, anything it cannot parse. A
//! declined message goes through the Python path, which decides what becomes of it.
mod binlog;
mod checksum;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};
use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::fmt;

#[derive(Deserialize)]
struct Source<'a> {
    #[serde(borrow)]
    file: Option<Cow<'a, str>>,
    pos: Option<i64>,
    row: Option<i64>,
    ts_ms: Option<i64>,
    #[serde(borrow)]
    gtid: Option<Cow<'a, str>>,
    #[serde(borrow)]
    snapshot: Option<Cow<'a, str>>,
    #[serde(borrow)]
    connector: Option<Cow<'a, str>>,
}

/// Whether a field is there at all: Python reads a message with `schema` or `payload` as a
/// wrapped one, whatever their values.
#[derive(Default)]
struct Present(bool);

impl<'de> Deserialize<'de> for Present {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        serde::de::IgnoredAny::deserialize(d)?;
        Ok(Present(true))
    }
}

#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow)]
    op: Option<Cow<'a, str>>,
    #[serde(borrow)]
    before: Option<&'a RawValue>,
    #[serde(borrow)]
    after: Option<&'a RawValue>,
    #[serde(borrow)]
    source: Option<Source<'a>>,
    ts_ms: Option<i64>,
    #[serde(default)]
    schema: Present,
    #[serde(default)]
    payload: Present,
}

/// A JSON object's members in order, values left as raw JSON text.
struct Fields<'a>(Vec<(Cow<'a, str>, &'a RawValue)>);

impl<'de> Deserialize<'de> for Fields<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Fields<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<M: MapAccess<'de>>(self, mut m: M) -> Result<Fields<'de>, M::Error> {
                let mut out = Vec::with_capacity(16);
                while let Some((k, v)) = m.next_entry::<Cow<'de, str>, &'de RawValue>()? {
                    out.push((k, v));
                }
                Ok(Fields(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// A converter of the table's plan (indexer.core.native.converter_step says which).
enum Step {
    Decimal(u32),  // Connect's Decimal at this scale (base64 two's complement)
    Datetime(u32), // MicroTimestamp at this many fraction digits
    DatetimeMillis(u32), // Timestamp (milliseconds) at this many fraction digits
}

struct Plan {
    steps: Vec<(String, Step)>,
    layout: Vec<String>,    // without schemas: the accepted row's field names, sorted
    value_prefix: Vec<u8>,  // with schemas: `{"schema":<the accepted schema>,"payload":`
    key_prefix: Vec<u8>,    // ... and its key's
}

const SCHEMA: &[u8] = b"{\"schema\":";

/// The payload of a message wrapped in `{"schema", "payload"}` whose schema is `prefix`'s
/// (the wrapper's closing brace cut off), as Python's split finds it; None for another schema.
fn unwrapped<'a>(message: &'a [u8], prefix: &[u8]) -> Option<&'a [u8]> {
    if prefix.is_empty() || !message.starts_with(prefix) || message.last() != Some(&b'}') {
        return None;
    }
    Some(&message[prefix.len()..message.len() - 1])
}

impl Plan {
    fn step(&self, name: &str) -> Option<&Step> {
        self.steps.iter().find(|(n, _)| n == name).map(|(_, s)| s)
    }
}

/// A string as orjson writes it: `"`, `\` and control characters escaped, the rest as is.
pub(crate) fn write_escaped(text: &str, out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    let bytes = text.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let short: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\t' => b"\\t",
            b'\r' => b"\\r",
            0x08 => b"\\b",
            0x0c => b"\\f",
            0..=0x1f => b"",
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        if short.is_empty() {
            out.extend_from_slice(b"\\u00");
            out.push(HEX[(b >> 4) as usize]);
            out.push(HEX[(b & 15) as usize]);
        } else {
            out.extend_from_slice(short);
        }
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian calendar.
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// indexer.core.values.datetime_from_micros; None where Python raises (years out of 1-9999).
fn datetime(micros: i64, fsp: u32, out: &mut String) -> Option<()> {
    use std::fmt::Write;
    let secs = micros.div_euclid(1_000_000);
    let frac = micros.rem_euclid(1_000_000);
    let (y, m, d) = civil(secs.div_euclid(86_400));
    let sod = secs.rem_euclid(86_400);
    if !(1..=9999).contains(&y) {
        return None;
    }
    write!(out, "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}", sod / 3600, sod / 60 % 60, sod % 60)
        .ok()?;
    if fsp > 0 {
        let fraction = format!("{frac:06}");
        out.push('.');
        out.push_str(&fraction[..fsp as usize]);
    }
    Some(())
}

/// indexer.core.values.decimal_from_base64 for values of up to 16 bytes.
fn decimal(b64: &str, scale: u32, out: &mut String) -> Option<()> {
    use base64::Engine;
    let raw = base64::engine::general_purpose::STANDARD.decode(b64).ok()?;
    if raw.is_empty() || raw.len() > 16 {
        return None;
    }
    let mut v: i128 = if raw[0] & 0x80 != 0 { -1 } else { 0 };
    for b in raw {
        v = (v << 8) | b as i128;
    }
    if v < 0 {
        out.push('-');
    }
    let digits = v.unsigned_abs().to_string();
    let scale = scale as usize;
    if scale == 0 {
        out.push_str(&digits);
        return Some(());
    }
    let digits = format!("{digits:0>width$}", width = scale + 1);
    let cut = digits.len() - scale;
    out.push_str(&digits[..cut]);
    out.push('.');
    out.push_str(&digits[cut..]);
    Some(())
}

/// Python's r"\.(\d+)$" (ASCII digits only), at most 18 of them to stay in an i64: more is
/// past the version's 19 bits anyway.
fn file_number(file: &str) -> Option<i64> {
    let (_, n) = file.rsplit_once('.')?;
    if n.is_empty() || n.len() > 18 || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    n.parse().ok()
}

/// A row image as its document's JSON object (without the closing brace) into `out`, and
/// the `#name=value` pairs of its content hash. None if any value is not plainly ordinary.
fn write_row<'a>(fields: &'a Fields<'a>, plan: &Plan, out: &mut Vec<u8>,
                 hashed: &mut Vec<(&'a str, Cow<'a, str>)>) -> Option<()> {
    out.push(b'{');
    for (i, (name, raw)) in fields.0.iter().enumerate() {
        if name == "_indexer" {
            return None; // the document's own field: Python's splice would repeat it
        }
        if i > 0 {
            out.push(b',');
        }
        write_escaped(name, out);
        out.push(b':');
        let r = raw.get();
        if r == "null" {
            out.extend_from_slice(b"null"); // NULLs are not hashed
            continue;
        }
        if let Some(step) = plan.step(name) {
            let mut text = String::new();
            match step {
                Step::Decimal(scale) => {
                    let s = r.strip_prefix('"').and_then(|s| s.strip_suffix('"'))?;
                    decimal(s, *scale, &mut text)?
                }
                Step::Datetime(fsp) => datetime(r.parse().ok()?, *fsp, &mut text)?,
                Step::DatetimeMillis(fsp) => {
                    datetime(r.parse::<i64>().ok()?.checked_mul(1000)?, *fsp, &mut text)?
                }
            }
            out.push(b'"');
            out.extend_from_slice(text.as_bytes());
            out.push(b'"');
            hashed.push((name, Cow::Owned(text)));
            continue;
        }
        let first = r.as_bytes()[0];
        if first == b'"' {
            if r.contains('\\') {
                let unescaped: String = serde_json::from_str(r).ok()?;
                write_escaped(&unescaped, out);
                hashed.push((name, Cow::Owned(unescaped)));
            } else {
                out.extend_from_slice(r.as_bytes());
                hashed.push((name, Cow::Borrowed(&r[1..r.len() - 1])));
            }
        } else if first == b'-' || first.is_ascii_digit() {
            // integers of 64 bits only: a float's text is orjson's to write
            if r.bytes().any(|c| c == b'.' || c == b'e' || c == b'E') || r.starts_with("-0") {
                return None; // (-0 is 0 to Python)
            }
            let _: i64 = r.parse().ok()?;
            out.extend_from_slice(r.as_bytes());
            hashed.push((name, Cow::Borrowed(r)));
        } else if r == "true" || r == "false" {
            out.extend_from_slice(r.as_bytes());
            hashed.push((name, Cow::Borrowed(if r == "true" { "1" } else { "0" })));
        } else {
            return None; // an object or an array
        }
    }
    Some(())
}

/// What the daemon needs of one message this side built.
struct Prepared<'a> {
    op: Cow<'a, str>,
    id: i64,
    document: Vec<u8>,
    file: Cow<'a, str>,
    pos: i64,
    row: i64,
    ts_ms: i64,
    gtid: Option<Cow<'a, str>>,
    snapshot: Option<Cow<'a, str>>,
    connector: Option<Cow<'a, str>>,
}

fn prepare_one<'a>(key: &'a [u8], value: &'a [u8], plan: &Plan) -> Option<Prepared<'a>> {
    let wrapped = value.starts_with(SCHEMA);
    let payload = if wrapped { unwrapped(value, &plan.value_prefix)? } else { value };
    // msgspec and orjson refuse invalid UTF-8 anywhere, skipped fields included; serde_json
    // checks only the strings it reads.
    let text = std::str::from_utf8(payload).ok()?;
    let envelope: Envelope = serde_json::from_str(text).ok()?;
    if envelope.schema.0 || envelope.payload.0 {
        return None;
    }
    let op = envelope.op?;
    if op != "c" && op != "u" && op != "r" {
        return None;
    }
    let source = envelope.source?;
    // The bounds of indexer.core.versions (the epoch is applied by Python).
    let file = source.file?;
    let (number, pos, row) = (file_number(&file)?, source.pos?, source.row.unwrap_or(0));
    if !(0 < number && number < (1 << 19) && (0..1 << 32).contains(&pos)
         && (0..1 << 12).contains(&row)) {
        return None;
    }

    let key = if key.starts_with(SCHEMA) {
        unwrapped(key, &plan.key_prefix)?
    } else if wrapped {
        return None; // a bare key beside a wrapped value: Python's plans differ for the two
    } else {
        key
    };
    let key_fields: Fields = serde_json::from_str(std::str::from_utf8(key).ok()?).ok()?;
    if key_fields.0.len() != 1 || plan.step(&key_fields.0[0].0).is_some() {
        return None;
    }
    let id: i64 = key_fields.0[0].1.get().parse().ok()?;

    // Python converts the before image too, and refuses the message if that fails.
    let mut scratch = Vec::new();
    let mut scratch_hashed = Vec::new();
    let before_fields: Fields;
    if let Some(before) = envelope.before {
        before_fields = serde_json::from_str(before.get()).ok()?;
        write_row(&before_fields, plan, &mut scratch, &mut scratch_hashed)?;
    }

    let fields: Fields = serde_json::from_str(envelope.after?.get()).ok()?;
    let mut names: Vec<&str> = fields.0.iter().map(|(n, _)| n.as_ref()).collect();
    names.sort_unstable();
    if names.windows(2).any(|w| w[0] == w[1]) {
        return None; // a name twice: Python keeps the last value at the first one's place
    }
    if !wrapped && (names.len() != plan.layout.len()
                    || names.iter().zip(&plan.layout).any(|(a, b)| *a != b.as_str())) {
        return None; // without schemas the names are the layout: another is Python's to see
    }
    let mut document = Vec::with_capacity(text.len());
    let mut hashed = Vec::with_capacity(fields.0.len());
    write_row(&fields, plan, &mut document, &mut hashed)?;
    hashed.sort_by(|a, b| a.0.cmp(b.0)); // UTF-8 byte order is code point order
    let mut crc = crc32fast::Hasher::new();
    for (name, value) in &hashed {
        crc.update(b"#");
        crc.update(name.as_bytes());
        crc.update(b"=");
        crc.update(value.as_bytes());
    }
    if !fields.0.is_empty() {
        document.push(b',');
    }
    document.extend_from_slice(b"\"_indexer\":{\"hash\":");
    document.extend_from_slice(itoa::Buffer::new().format(crc.finalize()).as_bytes());
    document.extend_from_slice(b",\"key\":");
    document.extend_from_slice(itoa::Buffer::new().format(id).as_bytes());
    document.extend_from_slice(b"}}");

    let ts_ms = match source.ts_ms {
        Some(t) if t != 0 => t,
        _ => envelope.ts_ms.unwrap_or(0),
    };
    Some(Prepared { op, id, document, file, pos, row, ts_ms, gtid: source.gtid,
                    snapshot: source.snapshot, connector: source.connector })
}

/// prepare(keys, values, steps, layout, value_prefix, key_prefix) -> a list with, per
/// message, None (the Python path's to decode) or (op, id, document, file, pos, row, ts_ms,
/// gtid, snapshot, connector).
///
/// ``steps``: (field, "decimal" | "datetime" | "datetime-ms", scale or fraction digits) for
/// the fields that are converted; ``layout``: without schemas, the accepted row's field names,
/// sorted; ``value_prefix`` and ``key_prefix``: with schemas, the accepted schemas' messages
/// up to their payload (b"": messages with schemas are declined).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn prepare<'py>(py: Python<'py>, keys: &Bound<'py, PyList>, values: &Bound<'py, PyList>,
                steps: Vec<(String, String, u32)>, layout: Vec<String>, value_prefix: Vec<u8>,
                key_prefix: Vec<u8>) -> PyResult<Bound<'py, PyList>> {
    let mut plan = Plan { steps: Vec::with_capacity(steps.len()), layout, value_prefix,
                          key_prefix };
    for (name, kind, parameter) in steps {
        let step = match kind.as_str() {
            "decimal" => Step::Decimal(parameter),
            "datetime" if parameter <= 6 => Step::Datetime(parameter),
            "datetime-ms" if parameter <= 6 => Step::DatetimeMillis(parameter),
            _ => return Err(pyo3::exceptions::PyValueError::new_err(
                format!("no native step {kind:?}({parameter}) for {name:?}"))),
        };
        plan.steps.push((name, step));
    }
    let results = PyList::empty(py);
    for (key, value) in keys.iter().zip(values.iter()) {
        let prepared = match (key.cast::<PyBytes>(), value.cast::<PyBytes>()) {
            (Ok(k), Ok(v)) => prepare_one(k.as_bytes(), v.as_bytes(), &plan),
            _ => None, // no key or no value (a tombstone): Python's
        };
        match prepared {
            Some(p) => results.append(PyTuple::new(py, [
                p.op.as_ref().into_pyobject(py)?.into_any(),
                p.id.to_string().into_pyobject(py)?.into_any(),
                PyBytes::new(py, &p.document).into_any(),
                p.file.as_ref().into_pyobject(py)?.into_any(),
                p.pos.into_pyobject(py)?.into_any(),
                p.row.into_pyobject(py)?.into_any(),
                p.ts_ms.into_pyobject(py)?.into_any(),
                p.gtid.as_deref().into_pyobject(py)?.into_any(),
                p.snapshot.as_deref().into_pyobject(py)?.into_any(),
                p.connector.as_deref().into_pyobject(py)?.into_any(),
            ])?)?,
            None => results.append(py.None())?,
        }
    }
    Ok(results)
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(prepare, m)?)?;
    m.add_class::<binlog::RowPlan>()?;
    m.add_function(wrap_pyfunction!(checksum::content_hash, m)?)?;
    Ok(())
}
