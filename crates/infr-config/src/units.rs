//! Value types with their own text syntax: memory sizes (`19g`, `512m`, `80%`) and seeds (`42`, `-1`, `random`).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// `N%` as a share in (0, 100] (`None` when the text does not end with `%`), or why not.
fn percent(t: &str) -> Option<Result<f64, &'static str>> {
    let num = t.strip_suffix('%')?;
    Some(match num.trim().parse::<f64>() {
        Err(_) => Err("not a number before '%'"),
        Ok(p) if !(p > 0.0 && p <= 100.0) => Err("a percentage must be in (0, 100]"),
        Ok(p) => Ok(p),
    })
}

/// A memory budget: an absolute byte count or a share of what is available.
///
/// Text forms: `19g`, `1.5G`, `512m`, `64k`, `4096` (bytes), `80%`. Units are binary (k = 1024), as in
/// llama.cpp's and most tools' memory options; `kb`/`kib`/`gb`/`gib` spellings are accepted too.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SizeSpec {
    /// An absolute size in bytes.
    Bytes(u64),
    /// A percentage (0 < p ≤ 100) of the memory available to the consumer.
    Percent(f64),
}

/// Why a size string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid size {input:?}: {reason} (examples: 19g, 512m, 80%)")]
pub struct SizeParseError {
    /// The rejected text.
    pub input: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl SizeSpec {
    /// Resolves against a total: bytes as is, a percentage of `total`.
    pub fn resolve(&self, total: u64) -> u64 {
        match *self {
            SizeSpec::Bytes(b) => b,
            SizeSpec::Percent(p) => ((total as f64) * p / 100.0) as u64,
        }
    }
}

impl FromStr for SizeSpec {
    type Err = SizeParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |reason| SizeParseError { input: s.to_string(), reason };
        let t = s.trim().to_ascii_lowercase();
        if t.is_empty() {
            return Err(err("empty"));
        }
        if let Some(p) = percent(&t) {
            return p.map(SizeSpec::Percent).map_err(err);
        }
        let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
        let (num, unit) = t.split_at(split);
        let mult: u64 = match unit.trim() {
            "" | "b" => 1,
            "k" | "kb" | "kib" => 1 << 10,
            "m" | "mb" | "mib" => 1 << 20,
            "g" | "gb" | "gib" => 1 << 30,
            "t" | "tb" | "tib" => 1 << 40,
            _ => return Err(err("unknown unit (use k, m, g, t or %)")),
        };
        if num.is_empty() {
            return Err(err("no number"));
        }
        if let Ok(n) = num.parse::<u64>() {
            return n.checked_mul(mult).map(SizeSpec::Bytes).ok_or_else(|| err("too large"));
        }
        let f: f64 = num.parse().map_err(|_| err("not a number"))?;
        let bytes = f * mult as f64;
        if !bytes.is_finite() || bytes >= u64::MAX as f64 {
            return Err(err("too large"));
        }
        Ok(SizeSpec::Bytes(bytes.round() as u64))
    }
}

impl fmt::Display for SizeSpec {
    /// The shortest exact form: `19g`, `512m`, `3k`, `1000` (bytes) or `80%`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            SizeSpec::Percent(p) => write!(f, "{p}%"),
            SizeSpec::Bytes(b) => {
                for (shift, unit) in [(40, "t"), (30, "g"), (20, "m"), (10, "k")] {
                    if b != 0 && b % (1u64 << shift) == 0 {
                        return write!(f, "{}{unit}", b >> shift);
                    }
                }
                write!(f, "{b}")
            }
        }
    }
}

impl Serialize for SizeSpec {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for SizeSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Int(n) => Ok(SizeSpec::Bytes(n)),
            Raw::Text(t) => t.parse().map_err(serde::de::Error::custom),
        }
    }
}

/// A context size: a token count (`8192`, `32k` = 32768), `0` for the model's trained
/// context, or `50%`: the longest context whose KV cache fits in that share of the device
/// memory left after the weights.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ContextSize {
    /// This many tokens (0: the model's trained context).
    Tokens(u64),
    /// A percentage (0 < p ≤ 100) of the memory left after the weights.
    Percent(f64),
}

/// Why a context size was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid context size {input:?}: {reason} (examples: 8192, 32k, 0 for the model's, 50%)")]
pub struct ContextParseError {
    /// The rejected text.
    pub input: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl FromStr for ContextSize {
    type Err = ContextParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |reason| ContextParseError { input: s.to_string(), reason };
        let t = s.trim().to_ascii_lowercase();
        if let Some(p) = percent(&t) {
            return p.map(ContextSize::Percent).map_err(err);
        }
        let (num, mult) = match t.strip_suffix('k') {
            Some(n) => (n.trim(), 1024u64),
            None => (t.as_str(), 1),
        };
        let n: u64 = num.parse().map_err(|_| err("not a whole number of tokens"))?;
        let tokens = n.checked_mul(mult).filter(|&v| v <= u32::MAX as u64).ok_or_else(|| err("too large"))?;
        Ok(ContextSize::Tokens(tokens))
    }
}

impl fmt::Display for ContextSize {
    /// `32k` for whole multiples of 1024, else the count; `50%`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ContextSize::Percent(p) => write!(f, "{p}%"),
            ContextSize::Tokens(n) if n >= 1024 && n % 1024 == 0 => write!(f, "{}k", n / 1024),
            ContextSize::Tokens(n) => write!(f, "{n}"),
        }
    }
}

impl Serialize for ContextSize {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match *self {
            ContextSize::Tokens(n) => s.serialize_u64(n),
            ContextSize::Percent(_) => s.serialize_str(&self.to_string()),
        }
    }
}

impl<'de> Deserialize<'de> for ContextSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Int(n) => Ok(ContextSize::Tokens(n)),
            Raw::Text(t) => t.parse().map_err(serde::de::Error::custom),
        }
    }
}

/// The sampling seed: fixed for reproducible output, or random per request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Seed {
    /// A fresh random seed each time (`-1`, `none` or `random`).
    #[default]
    Random,
    /// This seed.
    Fixed(u64),
}

impl FromStr for Seed {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        match t.to_ascii_lowercase().as_str() {
            "-1" | "none" | "random" => Ok(Seed::Random),
            _ => t.parse::<u64>().map(Seed::Fixed).map_err(|_| format!("invalid seed {t:?}")),
        }
    }
}

impl fmt::Display for Seed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Seed::Random => f.write_str("random"),
            Seed::Fixed(n) => write!(f, "{n}"),
        }
    }
}

impl Serialize for Seed {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match *self {
            Seed::Random => s.serialize_str("random"),
            Seed::Fixed(n) if n <= i64::MAX as u64 => s.serialize_i64(n as i64),
            Seed::Fixed(n) => s.serialize_str(&n.to_string()),
        }
    }
}

impl<'de> Deserialize<'de> for Seed {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(i64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Int(-1) => Ok(Seed::Random),
            Raw::Int(n) if n >= 0 => Ok(Seed::Fixed(n as u64)),
            Raw::Int(n) => Err(serde::de::Error::custom(format!("invalid seed {n}"))),
            Raw::Text(t) => t.parse().map_err(serde::de::Error::custom),
        }
    }
}
