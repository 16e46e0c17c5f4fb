//! Metadata values and typed accessors.

use std::collections::HashMap;
use std::fmt;

use crate::cursor::Cursor;
use crate::GgufError;

/// How deep arrays may nest; real files use one level.
const MAX_ARRAY_DEPTH: usize = 4;

/// The value type ids of GGUF metadata (`enum gguf_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum ValueType {
    U8 = 0,
    I8 = 1,
    U16 = 2,
    I16 = 3,
    U32 = 4,
    I32 = 5,
    F32 = 6,
    Bool = 7,
    String = 8,
    Array = 9,
    U64 = 10,
    I64 = 11,
    F64 = 12,
}

impl ValueType {
    fn from_id(id: u32) -> Option<Self> {
        use ValueType::*;
        Some(match id {
            0 => U8,
            1 => I8,
            2 => U16,
            3 => I16,
            4 => U32,
            5 => I32,
            6 => F32,
            7 => Bool,
            8 => String,
            9 => Array,
            10 => U64,
            11 => I64,
            12 => F64,
            _ => return None,
        })
    }

    /// Smallest encoded size of one value of this type (strings: their 8-byte length).
    fn min_size(self) -> usize {
        use ValueType::*;
        match self {
            U8 | I8 | Bool => 1,
            U16 | I16 => 2,
            U32 | I32 | F32 => 4,
            U64 | I64 | F64 | String => 8,
            Array => 12,
        }
    }
}

/// One metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
    Bool(bool),
    String(String),
    /// An array with the element type it was declared with (kept even when empty).
    Array(ValueType, Vec<Value>),
}

impl Value {
    /// The type of this value.
    pub fn value_type(&self) -> ValueType {
        match self {
            Value::U8(_) => ValueType::U8,
            Value::I8(_) => ValueType::I8,
            Value::U16(_) => ValueType::U16,
            Value::I16(_) => ValueType::I16,
            Value::U32(_) => ValueType::U32,
            Value::I32(_) => ValueType::I32,
            Value::U64(_) => ValueType::U64,
            Value::I64(_) => ValueType::I64,
            Value::F32(_) => ValueType::F32,
            Value::F64(_) => ValueType::F64,
            Value::Bool(_) => ValueType::Bool,
            Value::String(_) => ValueType::String,
            Value::Array(..) => ValueType::Array,
        }
    }

    /// A short type description for error messages, e.g. `u32` or `array[string; 151936]`.
    pub fn type_name(&self) -> String {
        match self {
            Value::Array(t, v) => format!("array[{t:?}; {}]", v.len()).to_lowercase(),
            other => format!("{:?}", other.value_type()).to_lowercase(),
        }
    }

    /// Any integer value as i64 (u64 above i64::MAX is None).
    pub fn as_i64(&self) -> Option<i64> {
        Some(match *self {
            Value::U8(v) => v as i64,
            Value::I8(v) => v as i64,
            Value::U16(v) => v as i64,
            Value::I16(v) => v as i64,
            Value::U32(v) => v as i64,
            Value::I32(v) => v as i64,
            Value::U64(v) => i64::try_from(v).ok()?,
            Value::I64(v) => v,
            _ => return None,
        })
    }

    /// Any non-negative integer value as u64.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U64(v) => Some(v),
            _ => self.as_i64().and_then(|v| u64::try_from(v).ok()),
        }
    }

    /// Any numeric value as f64.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v as f64),
            Value::F64(v) => Some(v),
            _ => self.as_i64().map(|v| v as f64),
        }
    }

    /// A boolean value.
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Value::Bool(b) => Some(b),
            _ => None,
        }
    }

    /// A string value.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// An array's elements.
    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(_, v) => Some(v),
            _ => None,
        }
    }

    pub(crate) fn read(c: &mut Cursor<'_>, ty: ValueType, key: &str, depth: usize) -> Result<Value, GgufError> {
        let what = || format!("value of metadata key '{key}'");
        Ok(match ty {
            ValueType::U8 => Value::U8(c.u8(&what)?),
            ValueType::I8 => Value::I8(c.u8(&what)? as i8),
            ValueType::U16 => Value::U16(c.u16(&what)?),
            ValueType::I16 => Value::I16(c.u16(&what)? as i16),
            ValueType::U32 => Value::U32(c.u32(&what)?),
            ValueType::I32 => Value::I32(c.u32(&what)? as i32),
            ValueType::U64 => Value::U64(c.u64(&what)?),
            ValueType::I64 => Value::I64(c.u64(&what)? as i64),
            ValueType::F32 => Value::F32(f32::from_bits(c.u32(&what)?)),
            ValueType::F64 => Value::F64(f64::from_bits(c.u64(&what)?)),
            ValueType::Bool => match c.u8(&what)? {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                b => {
                    return Err(GgufError::WrongType {
                        key: key.to_owned(),
                        expected: "bool (0 or 1)",
                        found: format!("byte {b}"),
                    })
                }
            },
            ValueType::String => Value::String(c.string(&what)?),
            ValueType::Array => {
                if depth >= MAX_ARRAY_DEPTH {
                    return Err(GgufError::TooDeep { key: key.to_owned(), max: MAX_ARRAY_DEPTH });
                }
                let id = c.u32(&what)?;
                let elem = ValueType::from_id(id).ok_or_else(|| GgufError::BadValueType { key: key.to_owned(), id })?;
                let n = c.count(elem.min_size(), &|| format!("array length of metadata key '{key}'"))?;
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    items.push(Value::read(c, elem, key, depth + 1)?);
                }
                Value::Array(elem, items)
            }
        })
    }

    pub(crate) fn write(&self, out: &mut Vec<u8>) {
        match self {
            Value::U8(v) => out.push(*v),
            Value::I8(v) => out.push(*v as u8),
            Value::U16(v) => out.extend_from_slice(&v.to_le_bytes()),
            Value::I16(v) => out.extend_from_slice(&v.to_le_bytes()),
            Value::U32(v) => out.extend_from_slice(&v.to_le_bytes()),
            Value::I32(v) => out.extend_from_slice(&v.to_le_bytes()),
            Value::U64(v) => out.extend_from_slice(&v.to_le_bytes()),
            Value::I64(v) => out.extend_from_slice(&v.to_le_bytes()),
            Value::F32(v) => out.extend_from_slice(&v.to_le_bytes()),
            Value::F64(v) => out.extend_from_slice(&v.to_le_bytes()),
            Value::Bool(v) => out.push(*v as u8),
            Value::String(s) => write_string(out, s),
            Value::Array(t, items) => {
                out.extend_from_slice(&(*t as u32).to_le_bytes());
                out.extend_from_slice(&(items.len() as u64).to_le_bytes());
                for it in items {
                    it.write(out);
                }
            }
        }
    }
}

pub(crate) fn write_string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

pub(crate) fn read_value_type(c: &mut Cursor<'_>, key: &str) -> Result<ValueType, GgufError> {
    let id = c.u32(&|| format!("type of metadata key '{key}'"))?;
    ValueType::from_id(id).ok_or_else(|| GgufError::BadValueType { key: key.to_owned(), id })
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::String(s) => write!(f, "{s:?}"),
            Value::Array(_, items) => {
                write!(f, "[")?;
                for (i, it) in items.iter().take(8).enumerate() {
                    if i > 0 {
                        write!(f, ", ")?;
                    }
                    write!(f, "{it}")?;
                }
                if items.len() > 8 {
                    write!(f, ", ... ({} items)", items.len())?;
                }
                write!(f, "]")
            }
            Value::F32(v) => write!(f, "{v}"),
            Value::F64(v) => write!(f, "{v}"),
            Value::Bool(v) => write!(f, "{v}"),
            other => write!(f, "{}", other.as_i64().map(|v| v.to_string()).unwrap_or_else(|| format!("{other:?}"))),
        }
    }
}

/// The key/value metadata of a GGUF file, in file order, with typed lookups.
#[derive(Debug, Clone, Default)]
pub struct Metadata {
    entries: Vec<(String, Value)>,
    index: HashMap<String, usize>,
}

impl Metadata {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Insert or replace a key.
    pub fn insert(&mut self, key: impl Into<String>, value: Value) {
        let key = key.into();
        if let Some(&i) = self.index.get(&key) {
            self.entries[i].1 = value;
        } else {
            self.index.insert(key.clone(), self.entries.len());
            self.entries.push((key, value));
        }
    }

    pub(crate) fn insert_new(&mut self, key: String, value: Value) -> Result<(), GgufError> {
        if self.index.contains_key(&key) {
            return Err(GgufError::DuplicateKey(key));
        }
        self.insert(key, value);
        Ok(())
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.index.get(key).map(|&i| &self.entries[i].1)
    }

    /// All entries in file order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when there are no keys.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn wrong(key: &str, expected: &'static str, v: &Value) -> GgufError {
        GgufError::WrongType { key: key.to_owned(), expected, found: v.type_name() }
    }

    /// A string value; `Ok(None)` if absent, an error if present with another type.
    pub fn str(&self, key: &str) -> Result<Option<&str>, GgufError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v.as_str().map(Some).ok_or_else(|| Self::wrong(key, "string", v)),
        }
    }

    /// An unsigned integer value of any width.
    pub fn u64(&self, key: &str) -> Result<Option<u64>, GgufError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v.as_u64().map(Some).ok_or_else(|| Self::wrong(key, "unsigned integer", v)),
        }
    }

    /// A float value (integers are accepted too).
    pub fn f64(&self, key: &str) -> Result<Option<f64>, GgufError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v.as_f64().map(Some).ok_or_else(|| Self::wrong(key, "number", v)),
        }
    }

    /// A boolean value.
    pub fn bool(&self, key: &str) -> Result<Option<bool>, GgufError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v.as_bool().map(Some).ok_or_else(|| Self::wrong(key, "bool", v)),
        }
    }

    /// An array value.
    pub fn array(&self, key: &str) -> Result<Option<&[Value]>, GgufError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v.as_array().map(Some).ok_or_else(|| Self::wrong(key, "array", v)),
        }
    }

    /// An array of strings.
    pub fn str_array(&self, key: &str) -> Result<Option<Vec<&str>>, GgufError> {
        let Some(items) = self.array(key)? else {
            return Ok(None);
        };
        items
            .iter()
            .map(|v| v.as_str().ok_or_else(|| Self::wrong(key, "array of strings", v)))
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }

    /// A required unsigned integer.
    pub fn require_u64(&self, key: &str) -> Result<u64, GgufError> {
        self.u64(key)?.ok_or_else(|| GgufError::MissingKey(key.to_owned()))
    }

    /// A required string.
    pub fn require_str(&self, key: &str) -> Result<&str, GgufError> {
        self.str(key)?.ok_or_else(|| GgufError::MissingKey(key.to_owned()))
    }
}
