//! Request fields shared by the endpoints: sampling knobs, token limits and stop strings.

use infr_engine::{Request, SamplingParams};
use serde::Deserialize;

use crate::errors::ApiError;

/// `stop`: one string or a list.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum StopSpec {
    /// A single stop string.
    One(String),
    /// Several stop strings.
    Many(Vec<String>),
}

impl StopSpec {
    /// The stop strings as a list.
    pub fn into_vec(self) -> Vec<String> {
        match self {
            StopSpec::One(s) => vec![s],
            StopSpec::Many(v) => v,
        }
    }
}

/// Declares a request body struct with the sampling fields every generating endpoint accepts
/// appended to the fields given, plus `sampling_knobs()` copying them into [`Knobs`] (limits
/// and stop strings are left to the caller: their names differ per API). Written out rather
/// than `#[serde(flatten)]`ed so a wrong type still names its field in the 400 error.
macro_rules! sampling_request {
    ($(#[$meta:meta])* struct $name:ident { $($body:tt)* }) => {
        $(#[$meta])*
        #[derive(Debug, serde::Deserialize)]
        struct $name {
            $($body)*
            #[serde(default)]
            temperature: Option<f32>,
            #[serde(default)]
            top_p: Option<f32>,
            #[serde(default)]
            top_k: Option<i32>,
            #[serde(default)]
            min_p: Option<f32>,
            #[serde(default)]
            seed: Option<i64>,
            #[serde(default)]
            presence_penalty: Option<f32>,
            #[serde(default)]
            frequency_penalty: Option<f32>,
            #[serde(default)]
            repeat_penalty: Option<f32>,
            #[serde(default)]
            repeat_last_n: Option<i32>,
            #[serde(default)]
            n: Option<i64>,
            #[serde(default)]
            logit_bias: Option<serde_json::Value>,
            #[serde(default)]
            logprobs: Option<serde_json::Value>,
            #[serde(default)]
            top_logprobs: Option<serde_json::Value>,
            #[serde(default)]
            best_of: Option<serde_json::Value>,
            #[serde(default)]
            suffix: Option<serde_json::Value>,
        }

        impl $name {
            /// Refuse (400, naming the field) the OpenAI options this server does not implement
            /// yet, instead of answering as if they had been applied.
            fn refuse_unsupported(&self) -> Result<(), crate::ApiError> {
                crate::params::refuse_unsupported([
                    ("best_of", &self.best_of),
                    ("suffix", &self.suffix),
                ])
            }

            /// The sampling fields as [`Knobs`](crate::params::Knobs); `max_tokens` and `stop`
            /// unset.
            fn sampling_knobs(&self) -> crate::params::Knobs {
                crate::params::Knobs {
                    temperature: self.temperature,
                    top_p: self.top_p,
                    top_k: self.top_k,
                    min_p: self.min_p,
                    seed: self.seed,
                    presence_penalty: self.presence_penalty,
                    frequency_penalty: self.frequency_penalty,
                    repeat_penalty: self.repeat_penalty,
                    repeat_last_n: self.repeat_last_n,
                    n: self.n,
                    logit_bias: self.logit_bias.clone(),
                    max_tokens: None,
                    stop: Vec::new(),
                    logprobs: None,
                }
            }
        }
    };
}
pub(crate) use sampling_request;

/// The first of `fields` set to something that asks for an effect: a non-empty object or
/// string, `true`, or a number other than 0 (1 for `best_of`), as a 400 naming it.
pub(crate) fn refuse_unsupported<'a>(
    fields: impl IntoIterator<Item = (&'static str, &'a Option<serde_json::Value>)>,
) -> Result<(), crate::ApiError> {
    use serde_json::Value;
    for (name, v) in fields {
        let asks = match v {
            None | Some(Value::Null) | Some(Value::Bool(false)) => false,
            Some(Value::Object(m)) => !m.is_empty(),
            Some(Value::String(s)) => !s.is_empty(),
            Some(Value::Number(n)) => n.as_f64().is_some_and(|x| x != if name == "best_of" { 1.0 } else { 0.0 }),
            Some(_) => true,
        };
        if asks {
            return Err(crate::ApiError::bad(format!("{name} is not supported by this server yet"), name));
        }
    }
    Ok(())
}

/// The sampling and limit fields of a request, all optional.
#[derive(Debug, Clone, Default)]
pub struct Knobs {
    /// Temperature (0: greedy).
    pub temperature: Option<f32>,
    /// Nucleus sampling.
    pub top_p: Option<f32>,
    /// Top-k (0 disables).
    pub top_k: Option<i32>,
    /// Min-p.
    pub min_p: Option<f32>,
    /// RNG seed; negative means random.
    pub seed: Option<i64>,
    /// OpenAI presence penalty.
    pub presence_penalty: Option<f32>,
    /// OpenAI frequency penalty.
    pub frequency_penalty: Option<f32>,
    /// llama.cpp repetition penalty.
    pub repeat_penalty: Option<f32>,
    /// Tokens of history the penalties look at.
    pub repeat_last_n: Option<i32>,
    /// Most tokens to generate; negative or absent: until the end of generation.
    pub max_tokens: Option<i64>,
    /// Stop strings.
    pub stop: Vec<String>,
    /// `n` (only 1 is served).
    pub n: Option<i64>,
    /// OpenAI's `logit_bias`: `{"token id": bias}` (bias -100 to 100; -100 bans the token).
    pub logit_bias: Option<serde_json::Value>,
    /// Report log-probabilities with this many alternatives per token.
    pub logprobs: Option<usize>,
}

/// OpenAI chat's `logprobs` (bool) and `top_logprobs` (0 to 20): the alternatives to report,
/// or `None`. `top_logprobs` needs `logprobs: true`.
pub fn chat_logprobs(
    logprobs: Option<&serde_json::Value>,
    top: Option<&serde_json::Value>,
) -> Result<Option<usize>, ApiError> {
    let on = match logprobs {
        None | Some(serde_json::Value::Null) => false,
        Some(serde_json::Value::Bool(b)) => *b,
        Some(_) => return Err(ApiError::bad("logprobs must be a boolean", "logprobs")),
    };
    let n = match top {
        None | Some(serde_json::Value::Null) => None,
        Some(v) => match v.as_u64().filter(|&n| n as usize <= infr_engine::MAX_LOGPROBS) {
            Some(n) => Some(n as usize),
            None => {
                let max = infr_engine::MAX_LOGPROBS;
                return Err(ApiError::bad(format!("top_logprobs must be an integer from 0 to {max}"), "top_logprobs"));
            }
        },
    };
    match (on, n) {
        (true, n) => Ok(Some(n.unwrap_or(0))),
        (false, Some(_)) => Err(ApiError::bad("top_logprobs needs logprobs: true", "top_logprobs")),
        (false, None) => Ok(None),
    }
}

/// OpenAI completions' `logprobs` (an integer, the alternatives per token), or `None`.
pub fn completion_logprobs(v: Option<&serde_json::Value>) -> Result<Option<usize>, ApiError> {
    match v {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(v) => match v.as_u64().filter(|&n| n as usize <= infr_engine::MAX_LOGPROBS) {
            Some(n) => Ok(Some(n as usize)),
            None => Err(ApiError::bad(
                format!("logprobs must be an integer from 0 to {}", infr_engine::MAX_LOGPROBS),
                "logprobs",
            )),
        },
    }
}

/// The scheduler's form of `logit_bias`: ids as numbers; -100 (or less) bans a token, as
/// OpenAI documents; llama.cpp's `[[id, bias]]` list and `false` (ban) are read too.
fn logit_bias(v: Option<&serde_json::Value>) -> Result<Vec<(u32, f32)>, ApiError> {
    use serde_json::Value;
    let bad = |m: String| ApiError::bad(m, "logit_bias");
    let bias_of = |b: &Value| -> Result<f32, ApiError> {
        match b {
            Value::Bool(false) => Ok(f32::NEG_INFINITY),
            Value::Number(n) => {
                let x = n.as_f64().unwrap_or(f64::NAN);
                if !(-100.0..=100.0).contains(&x) {
                    return Err(bad(format!("bias {x} is outside -100..=100")));
                }
                Ok(if x <= -100.0 { f32::NEG_INFINITY } else { x as f32 })
            }
            other => Err(bad(format!("a bias must be a number, not {other}"))),
        }
    };
    let id_of = |k: &str| k.trim().parse::<u32>().map_err(|_| bad(format!("'{k}' is not a token id")));
    match v {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Object(m)) => m.iter().map(|(k, b)| Ok((id_of(k)?, bias_of(b)?))).collect(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|it| match it.as_array().map(Vec::as_slice) {
                Some([id, b]) => Ok((
                    id.as_u64()
                        .and_then(|i| u32::try_from(i).ok())
                        .ok_or_else(|| bad(format!("'{id}' is not a token id")))?,
                    bias_of(b)?,
                )),
                _ => Err(bad("list entries must be [token id, bias]".into())),
            })
            .collect(),
        Some(other) => Err(bad(format!("must be an object of token id -> bias, not {other}"))),
    }
}

/// A request ready for the scheduler plus the stop strings the server matches itself.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The scheduler request.
    pub request: Request,
    /// Stop strings.
    pub stops: Vec<String>,
}

impl Knobs {
    /// Build the scheduler request for `prompt`, filling unset fields from `defaults`.
    pub fn prepare(
        self,
        prompt: Vec<u32>,
        defaults: &SamplingParams,
        stop_ids: Vec<u32>,
    ) -> Result<Prepared, ApiError> {
        if let Some(n) = self.n {
            if n != 1 {
                return Err(ApiError::bad(
                    format!("n = {n} is not supported: only one choice (n = 1) is generated"),
                    "n",
                ));
            }
        }
        if self.stop.len() > 16 {
            return Err(ApiError::bad("at most 16 stop strings are supported", "stop"));
        }
        if let Some(t) = self.top_k {
            if t < 0 {
                return Err(ApiError::bad("top_k must be 0 (disabled) or positive", "top_k"));
            }
        }
        if let Some(t) = self.temperature {
            if !(t.is_finite() && t >= 0.0) {
                return Err(ApiError::bad("temperature must be a non-negative number", "temperature"));
            }
        }
        if let Some(p) = self.top_p {
            if !(p.is_finite() && (0.0..=1.0).contains(&p)) {
                return Err(ApiError::bad("top_p must be between 0 and 1", "top_p"));
            }
        }
        let d = defaults;
        let logit_bias = logit_bias(self.logit_bias.as_ref())?;
        let sampling = SamplingParams {
            temperature: self.temperature.unwrap_or(d.temperature),
            top_k: self.top_k.unwrap_or(d.top_k),
            top_p: self.top_p.unwrap_or(d.top_p),
            min_p: self.min_p.unwrap_or(d.min_p),
            repeat_penalty: self.repeat_penalty.unwrap_or(d.repeat_penalty),
            repeat_last_n: self.repeat_last_n.unwrap_or(d.repeat_last_n),
            presence_penalty: self.presence_penalty.unwrap_or(d.presence_penalty),
            frequency_penalty: self.frequency_penalty.unwrap_or(d.frequency_penalty),
            seed: match self.seed {
                Some(s) if s >= 0 => Some(s as u64),
                Some(_) => None,
                None => d.seed,
            },
            logit_bias,
        };
        sampling.validate().map_err(|e| ApiError::BadRequest { message: e.to_string(), param: None })?;
        let max_tokens = self.max_tokens.and_then(|m| usize::try_from(m).ok());
        let request = Request { prompt, sampling, max_tokens, stop_ids, timeout: None, logprobs: self.logprobs };
        Ok(Prepared { request, stops: self.stop })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logit_bias_forms() {
        use serde_json::json;
        assert_eq!(logit_bias(Some(&json!({"5": 2.5, " 7": -100}))).unwrap(), vec![(5, 2.5), (7, f32::NEG_INFINITY)]);
        assert_eq!(logit_bias(Some(&json!([[3, false], [4, 1]]))).unwrap(), vec![(3, f32::NEG_INFINITY), (4, 1.0)]);
        assert!(logit_bias(None).unwrap().is_empty());
        for bad in [json!({"x": 1}), json!({"1": 101}), json!({"1": "a"}), json!([[1]]), json!(3)] {
            assert!(logit_bias(Some(&bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn n_other_than_one_is_refused() {
        let k = Knobs { n: Some(2), ..Default::default() };
        let e = k.prepare(vec![1], &SamplingParams::default(), vec![]).unwrap_err();
        assert!(matches!(e, ApiError::BadRequest { param: Some(ref p), .. } if p == "n"));
    }

    #[test]
    fn defaults_fill_unset_fields_and_negative_values_mean_unlimited() {
        let k = Knobs { temperature: Some(0.0), seed: Some(-1), max_tokens: Some(-1), ..Default::default() };
        let p = k.prepare(vec![1, 2], &SamplingParams::default(), vec![7]).unwrap();
        assert_eq!(p.request.sampling.temperature, 0.0);
        assert_eq!(p.request.sampling.top_k, 40);
        assert_eq!(p.request.sampling.seed, None);
        assert_eq!(p.request.max_tokens, None);
        assert_eq!(p.request.stop_ids, vec![7]);
    }
}
