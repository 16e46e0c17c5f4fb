//! Checking and normalizing one value against its key's [`Kind`].

use crate::schema::Kind;
use crate::units::{ContextSize, Seed, SizeSpec};

/// A value as it arrives from a layer.
#[derive(Debug, Clone, PartialEq)]
pub enum RawValue {
    /// Typed, from TOML or a typed flag: must already have the right type (ints are fine for floats).
    Toml(toml::Value),
    /// Text, from env, `--set` or a string flag: parsed according to the key's kind.
    Text(String),
}

impl RawValue {
    /// How the value is shown in a type error: strings quoted, TOML values in TOML syntax.
    pub fn shown(&self) -> String {
        match self {
            RawValue::Text(t) => format!("{t:?}"),
            RawValue::Toml(toml::Value::String(s)) => format!("{s:?}"),
            RawValue::Toml(toml::Value::Table(_)) => "a table".into(),
            RawValue::Toml(toml::Value::Array(_)) => "an array".into(),
            RawValue::Toml(v) => v.to_string(),
        }
    }
}

/// A value for [`crate::ConfigBuilder::flag`]: typed numbers/bools, or text parsed like env values.
#[derive(Debug, Clone, PartialEq)]
pub struct FlagValue(pub RawValue);

macro_rules! flag_from {
    ($($t:ty => $conv:expr),* $(,)?) => {$(
        impl From<$t> for FlagValue {
            fn from(v: $t) -> Self {
                #[allow(clippy::redundant_closure_call)]
                FlagValue(($conv)(v))
            }
        }
    )*};
}

flag_from! {
    bool => |v| RawValue::Toml(toml::Value::Boolean(v)),
    i32 => |v: i32| RawValue::Toml(toml::Value::Integer(v.into())),
    i64 => |v| RawValue::Toml(toml::Value::Integer(v)),
    u16 => |v: u16| RawValue::Toml(toml::Value::Integer(v.into())),
    u32 => |v: u32| RawValue::Toml(toml::Value::Integer(v.into())),
    u64 => |v: u64| RawValue::Text(v.to_string()),
    usize => |v: usize| RawValue::Text(v.to_string()),
    f32 => |v: f32| RawValue::Toml(toml::Value::Float(v.into())),
    f64 => |v| RawValue::Toml(toml::Value::Float(v)),
    String => RawValue::Text,
    &str => |v: &str| RawValue::Text(v.to_string()),
    &String => |v: &String| RawValue::Text(v.clone()),
    std::path::PathBuf => |v: std::path::PathBuf| RawValue::Text(v.to_string_lossy().into_owned()),
}

/// Upper bounds that only mirror the storage type (`i32`/`u32`/`i64`) and are not worth printing.
fn is_open_max(max: i64) -> bool {
    max == i64::MAX || max == u32::MAX as i64 || max == i32::MAX as i64
}

/// What a kind expects, for error messages ("expected a float").
pub fn expected(kind: &Kind) -> String {
    match kind {
        Kind::Bool => "a bool (true/false)".into(),
        Kind::Int { min, max } if *min == i64::MIN && *max == i64::MAX => "an integer".into(),
        Kind::Int { min, max } if is_open_max(*max) => format!("an integer >= {min}"),
        Kind::Int { min, max } => format!("an integer in {min}..={max}"),
        Kind::Float { min, max } if *max == f64::MAX && *min == 0.0 => "a float >= 0".into(),
        Kind::Float { min, max } if *max == f64::MAX => format!("a float >= {min}"),
        Kind::Float { min, max } => format!("a float in {min}..={max}"),
        Kind::Str => "a string".into(),
        Kind::Choice(c) => format!("one of {}", c.join(", ")),
        Kind::Size => "a size like 19g, 512m or 80%".into(),
        Kind::Seed => "a seed (unsigned integer, or -1/none/random)".into(),
        Kind::Context => "a context size like 8192, 32k, 0 (the model's) or 50%".into(),
    }
}

/// Short type name for the docs table.
pub fn type_name(kind: &Kind) -> String {
    match kind {
        Kind::Bool => "bool".into(),
        Kind::Int { min, max } if *min == i64::MIN && *max == i64::MAX => "int".into(),
        Kind::Int { min, max } if is_open_max(*max) => format!("int (>= {min})"),
        Kind::Int { min, max } => format!("int ({min}..={max})"),
        Kind::Float { min, max } if *max == f64::MAX => format!("float (>= {min})"),
        Kind::Float { min, max } => format!("float ({min}..={max})"),
        Kind::Str => "string".into(),
        Kind::Choice(c) => c.iter().map(|c| format!("`{c}`")).collect::<Vec<_>>().join(" \\| "),
        Kind::Size => "size (`19g`, `512m`, `80%`)".into(),
        Kind::Seed => "seed (u64 or `-1`)".into(),
        Kind::Context => "context (`8192`, `32k`, `0`, `50%`)".into(),
    }
}

fn parse_bool(t: &str) -> Option<bool> {
    match t.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Some(true),
        "false" | "0" | "no" | "off" => Some(false),
        _ => None,
    }
}

/// Strips one pair of matching quotes, so `--set server.host="0.0.0.0"` works even when the shell kept them.
fn unquote(t: &str) -> &str {
    let t = t.trim();
    for q in ['"', '\''] {
        if t.len() >= 2 && t.starts_with(q) && t.ends_with(q) {
            return &t[1..t.len() - 1];
        }
    }
    t
}

/// Checks `raw` against `kind` and returns the normalized TOML value stored in the merged tree.
///
/// The error is the part after the key: `expected a float, got "hot"`.
pub fn coerce(kind: &Kind, raw: &RawValue) -> Result<toml::Value, String> {
    use toml::Value as V;
    let fail = || format!("expected {}, got {}", expected(kind), raw.shown());
    match (kind, raw) {
        (Kind::Bool, RawValue::Toml(V::Boolean(b))) => Ok(V::Boolean(*b)),
        (Kind::Bool, RawValue::Text(t)) => parse_bool(t).map(V::Boolean).ok_or_else(fail),
        (Kind::Int { min, max }, r) => {
            let n = match r {
                RawValue::Toml(V::Integer(n)) => Some(*n),
                RawValue::Text(t) => unquote(t).parse::<i64>().ok(),
                _ => None,
            };
            n.filter(|n| n >= min && n <= max).map(V::Integer).ok_or_else(fail)
        }
        (Kind::Float { min, max }, r) => {
            let f = match r {
                RawValue::Toml(V::Float(f)) => Some(*f),
                RawValue::Toml(V::Integer(n)) => Some(*n as f64),
                RawValue::Text(t) => unquote(t).parse::<f64>().ok(),
                _ => None,
            };
            f.filter(|f| f.is_finite() && f >= min && f <= max).map(V::Float).ok_or_else(fail)
        }
        (Kind::Str, RawValue::Toml(V::String(s))) => Ok(V::String(s.clone())),
        (Kind::Str, RawValue::Text(t)) => Ok(V::String(unquote(t).to_string())),
        (Kind::Choice(choices), r) => {
            let s = match r {
                RawValue::Toml(V::String(s)) => Some(s.as_str()),
                RawValue::Text(t) => Some(unquote(t)),
                _ => None,
            };
            s.and_then(|s| choices.iter().find(|c| c.eq_ignore_ascii_case(s.trim())))
                .map(|c| V::String(c.to_string()))
                .ok_or_else(fail)
        }
        (Kind::Size, r) => {
            let spec = match r {
                RawValue::Toml(V::Integer(n)) if *n >= 0 => Ok(SizeSpec::Bytes(*n as u64)),
                RawValue::Toml(V::String(s)) => s.parse::<SizeSpec>().map_err(|e| e.reason.to_string()),
                RawValue::Text(t) => unquote(t).parse::<SizeSpec>().map_err(|e| e.reason.to_string()),
                _ => Err(String::new()),
            };
            match spec {
                Ok(s) => Ok(V::String(s.to_string())),
                Err(why) if why.is_empty() => Err(fail()),
                Err(why) => Err(format!("{} ({why})", fail())),
            }
        }
        (Kind::Context, r) => {
            let spec = match r {
                RawValue::Toml(V::Integer(n)) if *n >= 0 => Ok(ContextSize::Tokens(*n as u64)),
                RawValue::Toml(V::String(s)) => s.parse::<ContextSize>().map_err(|e| e.reason.to_string()),
                RawValue::Text(t) => unquote(t).parse::<ContextSize>().map_err(|e| e.reason.to_string()),
                _ => Err(String::new()),
            };
            match spec {
                Ok(ContextSize::Tokens(n)) if n <= u32::MAX as u64 => Ok(V::Integer(n as i64)),
                Ok(s @ ContextSize::Percent(_)) => Ok(V::String(s.to_string())),
                Ok(_) => Err(format!("{} (too large)", fail())),
                Err(why) if why.is_empty() => Err(fail()),
                Err(why) => Err(format!("{} ({why})", fail())),
            }
        }
        (Kind::Seed, r) => {
            let seed = match r {
                RawValue::Toml(V::Integer(-1)) => Some(Seed::Random),
                RawValue::Toml(V::Integer(n)) if *n >= 0 => Some(Seed::Fixed(*n as u64)),
                RawValue::Toml(V::String(s)) => s.parse().ok(),
                RawValue::Text(t) => unquote(t).parse().ok(),
                _ => None,
            };
            match seed {
                Some(Seed::Random) => Ok(V::String("random".into())),
                Some(Seed::Fixed(n)) if n <= i64::MAX as u64 => Ok(V::Integer(n as i64)),
                Some(Seed::Fixed(n)) => Ok(V::String(n.to_string())),
                None => Err(fail()),
            }
        }
        _ => Err(fail()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{INT, UFLOAT};

    fn text(s: &str) -> RawValue {
        RawValue::Text(s.into())
    }

    #[test]
    fn coercions() {
        assert_eq!(coerce(&Kind::Bool, &text("ON")), Ok(toml::Value::Boolean(true)));
        assert_eq!(coerce(&INT, &text("-3")), Ok(toml::Value::Integer(-3)));
        assert_eq!(coerce(&UFLOAT, &RawValue::Toml(toml::Value::Integer(1))), Ok(toml::Value::Float(1.0)));
        assert_eq!(coerce(&UFLOAT, &text("hot")), Err("expected a float >= 0, got \"hot\"".into()));
        assert!(coerce(&UFLOAT, &text("NaN")).is_err());
        assert_eq!(coerce(&Kind::Choice(&["f16", "q8_0"]), &text("Q8_0")), Ok(toml::Value::String("q8_0".into())));
        assert_eq!(coerce(&Kind::Size, &text("19G")), Ok(toml::Value::String("19g".into())));
        assert_eq!(coerce(&Kind::Context, &text("32k")), Ok(toml::Value::Integer(32768)));
        assert_eq!(coerce(&Kind::Context, &text("8192")), Ok(toml::Value::Integer(8192)));
        assert_eq!(coerce(&Kind::Context, &text("50%")), Ok(toml::Value::String("50%".into())));
        assert_eq!(coerce(&Kind::Context, &text("0")), Ok(toml::Value::Integer(0)));
        assert!(coerce(&Kind::Context, &text("120%")).is_err());
        assert!(coerce(&Kind::Context, &text("lots")).unwrap_err().contains("8192, 32k"));
        assert_eq!(coerce(&Kind::Seed, &text("none")), Ok(toml::Value::String("random".into())));
        assert_eq!(coerce(&Kind::Seed, &RawValue::Toml(toml::Value::Integer(7))), Ok(toml::Value::Integer(7)));
        assert_eq!(coerce(&Kind::Str, &text("\"0.0.0.0\"")), Ok(toml::Value::String("0.0.0.0".into())));
        assert!(coerce(&Kind::Str, &RawValue::Toml(toml::Value::Integer(3))).is_err());
    }
}
