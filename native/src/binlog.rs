//! The binlog source's row images (indexer.core.binlog_rows): a rows event's rows as the
//! canonical values the Python decoder gives, without a Python call per value.
//!
//! The Python decoder is the reference. A table whose columns are all of kinds this side has
//! gets a `RowPlan` (made by `binlog_rows.native_columns`); an event it cannot read exactly
//! (cut short, text that is not valid in its character set, a value out of range) is
//! declined (None) and read again by Python, which says what is wrong with it.
use base64::Engine;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyList, PyString, PyTuple};
use std::borrow::Cow;

enum Codec {
    Utf8,
    Ascii,
    Latin1, // MySQL's latin1: cp1252, its five undefined bytes kept as C1 controls
}

enum Column {
    Int { size: usize, signed: bool },
    Year,
    Float,
    Double,
    Decimal { precision: usize, scale: usize },
    Date,
    Datetime { fsp: usize },
    Timestamp { fsp: usize },
    Time { fsp: usize },
    Bool,
    Bits { size: usize },
    Enum { size: usize, members: Vec<Py<PyString>> },
    Set { size: usize, members: Vec<Py<PyString>> },
    Text { prefix: usize, codec: Codec },
    Binary { prefix: usize, pad: usize },
}

// The codes binlog_rows.native_columns gives each column kind.
const INT: u32 = 0;
const YEAR: u32 = 1;
const FLOAT: u32 = 2;
const DOUBLE: u32 = 3;
const DECIMAL: u32 = 4;
const DATE: u32 = 5;
const DATETIME: u32 = 6;
const TIMESTAMP: u32 = 7;
const TIME: u32 = 8;
const BOOL: u32 = 9;
const BITS: u32 = 10;
const ENUM: u32 = 11;
const SET: u32 = 12;
const TEXT: u32 = 13;
const BINARY: u32 = 14;

// cp1252's 0x80-0x9F; 0 where cp1252 leaves the byte undefined (kept as that C1 control).
const CP1252_HIGH: [u32; 32] = [
    0x20AC, 0, 0x201A, 0x0192, 0x201E, 0x2026, 0x2020, 0x2021, 0x02C6, 0x2030, 0x0160, 0x2039,
    0x0152, 0, 0x017D, 0, 0, 0x2018, 0x2019, 0x201C, 0x201D, 0x2022, 0x2013, 0x2014, 0x02DC,
    0x2122, 0x0161, 0x203A, 0x0153, 0, 0x017E, 0x0178,
];

// Bytes of a binary DECIMAL's leftover digits (fewer than the 9 a 4-byte group holds).
const DIGIT_BYTES: [usize; 10] = [0, 1, 1, 2, 2, 3, 3, 4, 4, 4];

/// Why an event is declined: it goes to the Python decoder, which reads it again.
struct Decline;

type Got<T> = Result<T, Decline>;

struct Reader<'a> {
    data: &'a [u8],
    at: usize,
    end: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Got<&'a [u8]> {
        let at = self.at;
        if at + n > self.end {
            return Err(Decline);
        }
        self.at = at + n;
        Ok(&self.data[at..at + n])
    }

    fn uint(&mut self, n: usize) -> Got<u64> {
        Ok(self.take(n)?.iter().rev().fold(0u64, |v, b| v << 8 | u64::from(*b)))
    }

    fn big(&mut self, n: usize) -> Got<u64> {
        Ok(self.take(n)?.iter().fold(0u64, |v, b| v << 8 | u64::from(*b)))
    }

    fn big_signed(&mut self, n: usize) -> Got<i64> {
        let value = self.big(n)? as i64;
        let unused = 64 - 8 * n as u32;
        Ok(value << unused >> unused)
    }
}

fn text<'r>(data: &'r [u8], codec: &Codec) -> Got<Cow<'r, str>> {
    match codec {
        Codec::Utf8 => Ok(Cow::Borrowed(std::str::from_utf8(data).map_err(|_| Decline)?)),
        Codec::Ascii if data.is_ascii() => Ok(Cow::Borrowed(
            std::str::from_utf8(data).map_err(|_| Decline)?)),
        Codec::Ascii => Err(Decline),
        Codec::Latin1 => Ok(Cow::Owned(data.iter().map(|&b| match b {
            0x80..=0x9F => char::from_u32(match CP1252_HIGH[usize::from(b - 0x80)] {
                0 => u32::from(b),
                mapped => mapped,
            }).unwrap_or('\u{fffd}'),
            _ => char::from(b),
        }).collect::<String>())),
    }
}

/// `value` in decimal, zero-padded to `width` digits: format!("{value:0width$}") without the
/// formatting machinery, which cost more than the rest of a row's reading.
fn push_padded(out: &mut String, value: u64, width: usize) {
    let mut buffer = itoa::Buffer::new();
    let text = buffer.format(value);
    for _ in text.len()..width {
        out.push('0');
    }
    out.push_str(text);
}

/// Three parts between separators, the first of `first_width` digits, the others of two:
/// YYYY-MM-DD (4, '-') or HH:MM:SS (2, ':').
fn push_three(out: &mut String, [first, second, third]: [u64; 3], first_width: usize,
              separator: char) {
    push_padded(out, first, first_width);
    out.push(separator);
    push_padded(out, second, 2);
    out.push(separator);
    push_padded(out, third, 2);
}

/// indexer.core.values.decimal_from_binary.
fn decimal(r: &mut Reader, precision: usize, scale: usize) -> Got<String> {
    let whole = precision.checked_sub(scale).ok_or(Decline)?;
    let mut sizes = Vec::with_capacity(16);
    if !whole.is_multiple_of(9) {
        sizes.push(DIGIT_BYTES[whole % 9]);
    }
    sizes.extend(std::iter::repeat_n(4, whole / 9 + scale / 9));
    if !scale.is_multiple_of(9) {
        sizes.push(DIGIT_BYTES[scale % 9]);
    }
    let size: usize = sizes.iter().sum();
    let mut raw = r.take(size)?.to_vec();
    if raw.is_empty() {
        return Err(Decline);
    }
    let negative = raw[0] & 0x80 == 0;
    raw[0] ^= 0x80;
    if negative {
        raw.iter_mut().for_each(|b| *b = !*b);
    }
    let whole_groups = usize::from(!whole.is_multiple_of(9)) + whole / 9;
    let mut digits = String::with_capacity(precision + 9);
    let mut at = 0;
    for (n, &size) in sizes.iter().enumerate() {
        let group = raw[at..at + size].iter().fold(0u64, |v, b| v << 8 | u64::from(*b));
        if n == 0 && n < whole_groups {
            push_padded(&mut digits, group, 0);
        } else if n < whole_groups || n - whole_groups < scale / 9 {
            push_padded(&mut digits, group, 9);
        } else {
            push_padded(&mut digits, group, scale % 9);
        }
        at += size;
    }
    let significant = digits.trim_start_matches('0');
    let zero = significant.is_empty();
    let digits = if zero { "0" } else { significant };
    let sign = if negative && !zero { "-" } else { "" };
    let mut out = String::with_capacity(digits.len() + scale + 3);
    out.push_str(sign);
    if scale == 0 {
        out.push_str(digits);
        return Ok(out);
    }
    let whole_end = digits.len().saturating_sub(scale);
    if whole_end == 0 {
        out.push('0'); // 0.05, not .05
    }
    out.push_str(&digits[..whole_end]);
    out.push('.');
    for _ in digits.len()..scale {
        out.push('0');
    }
    out.push_str(&digits[whole_end..]);
    Ok(out)
}

/// A temporal value's fraction of a second, in microseconds (signed, as DATETIME2 stores it).
fn fraction(r: &mut Reader, fsp: usize) -> Got<i64> {
    if fsp == 0 {
        return Ok(0);
    }
    let size = fsp.div_ceil(2);
    Ok(r.big_signed(size)? * match size { 1 => 10_000, 2 => 100, _ => 1 })
}

/// A fraction's `fsp` digits after a point (nothing for none).
fn push_fraction(out: &mut String, micros: i64, fsp: usize) -> Got<()> {
    if fsp == 0 {
        return Ok(());
    }
    if micros < 0 {
        return Err(Decline);
    }
    let start = out.len();
    out.push('.');
    push_padded(out, micros as u64, 6);
    out.truncate(start + fsp + 1);
    Ok(())
}

fn date(value: u64) -> Option<String> {
    let (day, month, year) = (value & 31, value >> 5 & 15, value >> 9);
    if year == 0 || month == 0 || day == 0 {
        return None; // a zero date, or one with a zero part: null, as Debezium sends it
    }
    let mut out = String::with_capacity(10);
    push_three(&mut out, [year, month, day], 4, '-');
    Some(out)
}

fn datetime(r: &mut Reader, fsp: usize) -> Got<Option<String>> {
    let mut packed = r.big(5)? as i64 - 0x80_0000_0000;
    let mut micros = fraction(r, fsp)?;
    if micros < 0 {
        packed -= 1;
        micros += 1_000_000;
    }
    let (ymd, hms) = (packed >> 17, packed & 0x1FFFF);
    let (year_month, day) = (ymd >> 5, ymd & 31);
    let (year, month) = (year_month.div_euclid(13), year_month.rem_euclid(13));
    if year == 0 || month == 0 || day == 0 {
        return Ok(None);
    }
    if year < 0 {
        return Err(Decline);
    }
    let mut out = String::with_capacity(26);
    push_three(&mut out, [year as u64, month as u64, day as u64], 4, '-');
    out.push('T');
    push_three(&mut out, [(hms >> 12) as u64, (hms >> 6 & 63) as u64, (hms & 63) as u64], 2, ':');
    push_fraction(&mut out, micros, fsp)?;
    Ok(Some(out))
}

/// Howard Hinnant's days_from_civil, inverted: (year, month, day) of days since 1970-01-01.
fn civil(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

fn timestamp(r: &mut Reader, fsp: usize) -> Got<Option<String>> {
    let seconds = r.big(4)? as i64;
    let micros = fraction(r, fsp)?;
    if seconds == 0 && micros == 0 {
        return Ok(None); // '0000-00-00 00:00:00'
    }
    let (year, month, day) = civil(seconds.div_euclid(86_400));
    let of_day = seconds.rem_euclid(86_400);
    let mut out = String::with_capacity(27);
    push_three(&mut out, [year as u64, month as u64, day as u64], 4, '-');
    out.push('T');
    push_three(&mut out, [(of_day / 3600) as u64, (of_day / 60 % 60) as u64,
                          (of_day % 60) as u64], 2, ':');
    push_fraction(&mut out, micros, fsp)?;
    out.push('Z');
    Ok(Some(out))
}

/// MySQL's TIME2: a signed duration, the fraction of a negative one counted back from the
/// next whole second.
fn time(r: &mut Reader, fsp: usize) -> Got<String> {
    let packed = if fsp >= 5 {
        r.big(6)? as i64 - 0x8000_0000_0000
    } else {
        let mut whole = r.big(3)? as i64 - 0x80_0000;
        let mut fraction = 0i64;
        if fsp > 0 {
            let size = fsp.div_ceil(2);
            fraction = r.big(size)? as i64;
            if whole < 0 && fraction != 0 {
                whole += 1;
                fraction -= 1 << (8 * size);
            }
            fraction *= if size == 1 { 10_000 } else { 100 };
        }
        (whole << 24) + fraction
    };
    let sign = if packed < 0 { "-" } else { "" };
    let packed = packed.abs();
    let (hms, micros) = (packed >> 24, packed & 0xFF_FFFF);
    let mut out = String::with_capacity(18);
    out.push_str(sign);
    push_three(&mut out, [(hms >> 12 & 0x3FF) as u64, (hms >> 6 & 63) as u64, (hms & 63) as u64],
               2, ':');
    push_fraction(&mut out, micros, fsp)?;
    Ok(out)
}

/// One value of a row image, before it becomes a Python object or a document's JSON.
#[derive(PartialEq)]
enum Value<'r> {
    Null,
    Int(i64),
    UInt(u64),
    Float(f64),
    Bool(bool),
    Text(Cow<'r, str>),
    Member(usize), // an ENUM's member, counted from 0
    Set(u64),      // a SET's members, one bit each
}

impl Column {
    fn read<'r>(&self, r: &mut Reader<'r>) -> Got<Value<'r>> {
        let owned = |s: String| Ok(Value::Text(Cow::Owned(s)));
        let or_null = |s: Option<String>| Ok(s.map_or(Value::Null, |s| Value::Text(Cow::Owned(s))));
        match self {
            Column::Int { size, signed: false } => Ok(Value::UInt(r.uint(*size)?)),
            Column::Int { size, signed: true } => {
                let unused = 64 - 8 * *size as u32;
                Ok(Value::Int((r.uint(*size)? << unused) as i64 >> unused))
            }
            Column::Year => {
                let value = r.uint(1)?;
                Ok(Value::UInt(if value == 0 { 0 } else { value + 1900 }))
            }
            Column::Float => {
                let bytes: [u8; 4] = r.take(4)?.try_into().map_err(|_| Decline)?;
                Ok(Value::Float(f64::from(f32::from_le_bytes(bytes))))
            }
            Column::Double => {
                let bytes: [u8; 8] = r.take(8)?.try_into().map_err(|_| Decline)?;
                Ok(Value::Float(f64::from_le_bytes(bytes)))
            }
            Column::Decimal { precision, scale } => owned(decimal(r, *precision, *scale)?),
            Column::Date => or_null(date(r.uint(3)?)),
            Column::Datetime { fsp } => or_null(datetime(r, *fsp)?),
            Column::Timestamp { fsp } => or_null(timestamp(r, *fsp)?),
            Column::Time { fsp } => owned(time(r, *fsp)?),
            Column::Bool => Ok(Value::Bool(r.uint(1)? != 0)),
            Column::Bits { size } => Ok(Value::UInt(r.big(*size)?)),
            Column::Enum { size, members } => {
                let index = r.uint(*size)? as usize;
                if index == 0 || index > members.len() {
                    return Ok(Value::Text(Cow::Borrowed("")));
                }
                Ok(Value::Member(index - 1))
            }
            Column::Set { size, .. } => Ok(Value::Set(r.uint(*size)?)),
            Column::Text { prefix, codec } => {
                let length = r.uint(*prefix)? as usize;
                Ok(Value::Text(text(r.take(length)?, codec)?))
            }
            Column::Binary { prefix, pad } => {
                let length = r.uint(*prefix)? as usize;
                let data = r.take(length)?;
                let encoded = if data.len() < *pad {
                    let mut padded = data.to_vec();
                    padded.resize(*pad, 0);
                    base64::engine::general_purpose::STANDARD.encode(padded)
                } else {
                    base64::engine::general_purpose::STANDARD.encode(data)
                };
                owned(encoded)
            }
        }
    }

    fn members(&self) -> &[Py<PyString>] {
        match self {
            Column::Enum { members, .. } | Column::Set { members, .. } => members,
            _ => &[],
        }
    }

    fn object<'py>(&self, py: Python<'py>, value: &Value) -> Got<Bound<'py, PyAny>> {
        Ok(match value {
            Value::Null => py.None().into_bound(py),
            Value::Int(v) => v.into_pyobject(py).map_err(|_| Decline)?.into_any(),
            Value::UInt(v) => v.into_pyobject(py).map_err(|_| Decline)?.into_any(),
            Value::Float(v) => PyFloat::new(py, *v).into_any(),
            Value::Bool(v) => PyBool::new(py, *v).to_owned().into_any(),
            Value::Text(s) => PyString::new(py, s).into_any(),
            Value::Member(i) => self.members()[*i].bind(py).clone().into_any(),
            Value::Set(bits) => {
                let chosen = PyList::empty(py);
                for (i, member) in self.members().iter().enumerate().take(64) {
                    if bits >> i & 1 == 1 {
                        chosen.append(member.bind(py)).map_err(|_| Decline)?;
                    }
                }
                chosen.into_any()
            }
        })
    }
}

/// A table's column as its documents write it.
struct Field {
    json_name: Vec<u8>,   // `"name":`, escaped as orjson escapes it
    hash_prefix: Vec<u8>, // `#name=`, the content hash's
    members: Vec<String>, // an ENUM's
}

/// A table map's columns, made once per map: reads its rows events' row images.
#[pyclass(frozen, module = "indexer._native")]
pub struct RowPlan {
    names: Vec<Py<PyString>>,
    columns: Vec<Column>,
    fields: Vec<Field>,
    by_name: Vec<usize>, // the columns in the order of their names: the content hash's order
    // Every column's values are written as documents write them (no float, no SET, no
    // column named like the documents' own field).
    writable: bool,
}

/// A rows event's images: (column, value) for each column present.
type Image<'r> = Vec<(usize, Value<'r>)>;

impl RowPlan {
    fn values<'r>(&self, r: &mut Reader<'r>, present: &[u8], into: &mut Image<'r>) -> Got<()> {
        into.clear();
        let chosen = (0..self.columns.len())
            .filter(|i| present.get(i / 8).is_some_and(|b| b >> (i % 8) & 1 == 1));
        let count = chosen.clone().count();
        let nulls = r.take(count.div_ceil(8))?;
        for (n, i) in chosen.enumerate() {
            let value = if nulls[n / 8] >> (n % 8) & 1 == 1 {
                Value::Null
            } else {
                self.columns[i].read(r)?
            };
            into.push((i, value));
        }
        Ok(())
    }

    fn image<'py>(&self, py: Python<'py>, r: &mut Reader, present: &[u8])
                  -> Got<Bound<'py, PyDict>> {
        let mut values = Vec::with_capacity(self.columns.len());
        self.values(r, present, &mut values)?;
        let row = PyDict::new(py);
        for (i, value) in &values {
            row.set_item(self.names[*i].bind(py), self.columns[*i].object(py, value)?)
                .map_err(|_| Decline)?;
        }
        Ok(row)
    }

    fn checked<'r>(&self, event: &'r [u8], start: usize, end: usize, present: &[u8],
                   present_after: &[u8]) -> Got<Reader<'r>> {
        if end > event.len() || start > end || present.len() * 8 < self.columns.len()
                || present_after.len() * 8 < self.columns.len() {
            return Err(Decline);
        }
        Ok(Reader { data: event, at: start, end })
    }

    #[allow(clippy::too_many_arguments)]
    fn all<'py>(&self, py: Python<'py>, event: &[u8], start: usize, end: usize, op: &str,
                present: &[u8], present_after: &[u8]) -> Got<Bound<'py, PyList>> {
        let mut r = self.checked(event, start, end, present, present_after)?;
        let found = PyList::empty(py);
        let none = || py.None().into_bound(py);
        while r.at < r.end {
            let first = self.image(py, &mut r, present)?.into_any();
            let pair = match op {
                "u" => [first, self.image(py, &mut r, present_after)?.into_any()],
                "d" => [first, none()],
                _ => [none(), first],
            };
            found.append(PyTuple::new(py, pair).map_err(|_| Decline)?).map_err(|_| Decline)?;
        }
        Ok(found)
    }

    /// An image's document, as indexer.core.documents.DocumentBuilder writes a row's (without
    /// a projection): the row's JSON, then `_indexer` with its content hash and chunk. Its id
    /// is the key column's value.
    fn document(&self, image: &Image, key: &Value, slots: &mut [usize], out: &mut Vec<u8>)
                -> Got<String> {
        let mut digits = itoa::Buffer::new();
        let (id, chunk): (String, (&[u8], i64)) = match key {
            Value::Int(v) => (digits.format(*v).to_owned(), (b"\"key\":", *v)),
            Value::UInt(v) if i64::try_from(*v).is_ok() => {
                (digits.format(*v).to_owned(), (b"\"key\":", *v as i64))
            }
            Value::UInt(v) => bucketed(digits.format(*v).to_owned()),
            Value::Text(s) => bucketed(s.to_string()),
            _ => return Err(Decline), // (Python's ids of other values are theirs to spell)
        };
        if id.is_empty() || id.len() > MAX_ID_BYTES {
            return Err(Decline); // an id Elasticsearch refuses: Python says why
        }
        slots.fill(usize::MAX);
        out.push(b'{');
        for (n, (i, value)) in image.iter().enumerate() {
            if n > 0 {
                out.push(b',');
            }
            let field = &self.fields[*i];
            out.extend_from_slice(&field.json_name);
            match value {
                Value::Null => out.extend_from_slice(b"null"),
                Value::Int(v) => out.extend_from_slice(digits.format(*v).as_bytes()),
                Value::UInt(v) => out.extend_from_slice(digits.format(*v).as_bytes()),
                Value::Bool(v) => out.extend_from_slice(if *v { b"true" } else { b"false" }),
                Value::Text(s) => crate::write_escaped(s, out),
                Value::Member(m) => crate::write_escaped(&field.members[*m], out),
                Value::Float(_) | Value::Set(_) => return Err(Decline),
            }
            slots[*i] = n;
        }
        let mut crc = crc32fast::Hasher::new();
        for &i in &self.by_name {
            let Some((_, value)) = image.get(slots[i]) else { continue };
            let field = &self.fields[i];
            let text: &[u8] = match value {
                Value::Null => continue, // NULLs are not hashed
                Value::Int(v) => digits.format(*v).as_bytes(),
                Value::UInt(v) => digits.format(*v).as_bytes(),
                Value::Bool(v) => if *v { b"1" } else { b"0" },
                Value::Text(s) => s.as_bytes(),
                Value::Member(m) => field.members[*m].as_bytes(),
                Value::Float(_) | Value::Set(_) => return Err(Decline),
            };
            crc.update(&field.hash_prefix);
            crc.update(text);
        }
        if !image.is_empty() {
            out.push(b',');
        }
        out.extend_from_slice(b"\"_indexer\":{\"hash\":");
        out.extend_from_slice(digits.format(crc.finalize()).as_bytes());
        out.push(b',');
        out.extend_from_slice(chunk.0);
        out.extend_from_slice(digits.format(chunk.1).as_bytes());
        out.extend_from_slice(b"}}");
        Ok(id)
    }

    /// Each row's (id, document) for inserts and updates that keep their key; see documents.
    #[allow(clippy::too_many_arguments)]
    fn built<'py>(&self, py: Python<'py>, event: &[u8], start: usize, end: usize, op: &str,
                  present: &[u8], present_after: &[u8], key: usize)
                  -> Got<Bound<'py, PyList>> {
        if !self.writable || key >= self.columns.len() || !(op == "c" || op == "u") {
            return Err(Decline);
        }
        let mut r = self.checked(event, start, end, present, present_after)?;
        let found = PyList::empty(py);
        let (mut before, mut after) = (Vec::new(), Vec::new());
        let mut slots = vec![usize::MAX; self.columns.len()];
        let mut out = Vec::with_capacity(256);
        let key_of = |image: &Image<'_>| image.iter().position(|(i, _)| *i == key);
        while r.at < r.end {
            if op == "u" {
                self.values(&mut r, present, &mut before)?;
            }
            self.values(&mut r, if op == "u" { present_after } else { present }, &mut after)?;
            let at = key_of(&after).ok_or(Decline)?;
            if op == "u" && before.get(key_of(&before).ok_or(Decline)?).map(|(_, v)| v)
                    != Some(&after[at].1) {
                return Err(Decline); // a new key: a delete and an insert, Python's to split
            }
            out.clear();
            let id = self.document(&after, &after[at].1, &mut slots, &mut out)?;
            let pair = [PyString::new(py, &id).into_any(), PyBytes::new(py, &out).into_any()];
            found.append(PyTuple::new(py, pair).map_err(|_| Decline)?).map_err(|_| Decline)?;
        }
        Ok(found)
    }
}

/// A key that is not an integer of 64 bits: its chunk is crc32(id) % 1024, and `id` its id.
fn bucketed(id: String) -> (String, (&'static [u8], i64)) {
    let bucket = i64::from(crc32fast::hash(id.as_bytes()) % KEY_BUCKETS);
    (id, (b"\"bucket\":", bucket))
}

// indexer.core.documents.KEY_BUCKETS and MAX_ID_BYTES
const KEY_BUCKETS: u32 = 1024;
const MAX_ID_BYTES: usize = 512;

#[pymethods]
impl RowPlan {
    /// RowPlan(names, columns): ``columns`` as binlog_rows.native_columns gives them, one
    /// (code, a, b, members) per name.
    #[new]
    fn new(names: Vec<Py<PyString>>, columns: Vec<(u32, usize, usize, Vec<Py<PyString>>)>)
           -> PyResult<Self> {
        if names.len() != columns.len() {
            return Err(pyo3::exceptions::PyValueError::new_err("one column per name"));
        }
        let mut planned = Vec::with_capacity(columns.len());
        let mut fields = Vec::with_capacity(columns.len());
        let mut texts = Vec::with_capacity(columns.len());
        let mut writable = true;
        Python::attach(|py| -> PyResult<()> {
            for (name, (code, a, b, members)) in names.iter().zip(columns) {
                let name = name.bind(py).to_str()?.to_owned();
                let mut json_name = Vec::with_capacity(name.len() + 3);
                crate::write_escaped(&name, &mut json_name);
                json_name.push(b':');
                let member_texts = members.iter().map(|m| Ok(m.bind(py).to_str()?.to_owned()))
                    .collect::<PyResult<Vec<String>>>()?;
                writable &= !matches!(code, FLOAT | DOUBLE | SET) && name != "_indexer";
                fields.push(Field { json_name, hash_prefix: format!("#{name}=").into_bytes(),
                                    members: member_texts });
                texts.push(name);
                planned.push(column(code, a, b, members)?);
            }
            Ok(())
        })?;
        let mut by_name: Vec<usize> = (0..texts.len()).collect();
        by_name.sort_by(|x, y| texts[*x].cmp(&texts[*y])); // UTF-8 order is code point order
        Ok(RowPlan { names, columns: planned, fields, by_name, writable })
    }

    /// rows(event, start, end, op, present, present_after) -> [(before, after), ...] as
    /// RowDecoder.rows gives them, or None: the event is the Python decoder's.
    #[allow(clippy::too_many_arguments)]
    fn rows<'py>(&self, py: Python<'py>, event: &[u8], start: usize, end: usize, op: &str,
                 present: &[u8], present_after: &[u8]) -> Option<Bound<'py, PyList>> {
        self.all(py, event, start, end, op, present, present_after).ok()
    }

    /// documents(event, start, end, op, present, present_after, key) -> [(id, document), ...]
    /// for an insert or update event of a table whose documents are its rows as they are and
    /// whose key is the one column ``key`` (an integer or text), or None: the event is the
    /// Python path's (a delete, an update of a key, a float or SET column, a value it cannot
    /// read).
    #[allow(clippy::too_many_arguments)]
    fn documents<'py>(&self, py: Python<'py>, event: &[u8], start: usize, end: usize, op: &str,
                      present: &[u8], present_after: &[u8], key: usize)
                      -> Option<Bound<'py, PyList>> {
        self.built(py, event, start, end, op, present, present_after, key).ok()
    }
}

fn column(code: u32, a: usize, b: usize, members: Vec<Py<PyString>>) -> PyResult<Column> {
    let sized = |n: usize| if (1..=8).contains(&n) { Ok(n) } else {
        Err(pyo3::exceptions::PyValueError::new_err(format!("a size of {n} bytes")))
    };
    Ok(match code {
        INT => Column::Int { size: sized(a)?, signed: b != 0 },
        YEAR => Column::Year,
        FLOAT => Column::Float,
        DOUBLE => Column::Double,
        DECIMAL => Column::Decimal { precision: a, scale: b },
        DATE => Column::Date,
        DATETIME => Column::Datetime { fsp: a.min(6) },
        TIMESTAMP => Column::Timestamp { fsp: a.min(6) },
        TIME => Column::Time { fsp: a.min(6) },
        BOOL => Column::Bool,
        BITS => Column::Bits { size: sized(a)? },
        ENUM => Column::Enum { size: sized(a)?, members },
        SET => Column::Set { size: sized(a)?, members },
        TEXT => Column::Text { prefix: sized(a)?, codec: match b {
            0 => Codec::Utf8,
            1 => Codec::Ascii,
            2 => Codec::Latin1,
            _ => return Err(pyo3::exceptions::PyValueError::new_err(
                format!("no native codec {b}"))),
        } },
        BINARY => Column::Binary { prefix: sized(a)?, pad: b },
        _ => return Err(pyo3::exceptions::PyValueError::new_err(
            format!("no native column kind {code}"))),
    })
}
