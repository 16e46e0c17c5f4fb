//! Choosing the GGUF file(s) of a repository the way llama.cpp's `-hf` does (`common/download.cpp`).
//!
//! - Only model files count: `.gguf` whose file name contains none of `mmproj`, `imatrix`, `mtp-`, `eagle3-`,
//!   `dflash-`, `dspark-`.
//! - A tag matches a path that contains it followed by `.` or `-`, case-insensitively (llama.cpp's
//!   `regex(tag + "[.-]", icase)`). Before that rule we try files whose own quant suffix *equals* the tag, so
//!   `Q4_0` never picks `IQ4_0` when both exist.
//! - No tag: `Q4_K_M`, then `Q8_0`, then the first model file.
//! - Split models (`name-00001-of-00003.gguf`): only shard 1 is a candidate; all shards with the same prefix
//!   and count are returned, in order, and a missing shard is an error.

use crate::error::HubError;
use crate::model_ref::Selector;

/// Parsed file name of a GGUF file: `prefix[-00001-of-00003].gguf`, whose prefix ends in `-TAG` or `.TAG`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitInfo {
    /// Path without `.gguf` and without the shard suffix; it includes the tag.
    pub prefix: String,
    /// Upper-cased quant tag (`Q4_K_M`, `F16`), empty when the name has none.
    pub tag: String,
    /// 1-based shard index (1 for unsplit files).
    pub index: u32,
    /// Number of shards (1 for unsplit files).
    pub count: u32,
}

/// Splits a `.gguf` path into prefix, tag and shard numbers; `None` if it does not end in `.gguf`.
pub fn split_info(path: &str) -> Option<SplitInfo> {
    let lower = path.to_ascii_lowercase();
    if !lower.ends_with(".gguf") {
        return None;
    }
    let mut prefix = &path[..path.len() - 5];
    let (mut index, mut count) = (1, 1);
    // `-NNNNN-of-NNNNN` is 15 characters.
    if prefix.len() > 15 && prefix.is_char_boundary(prefix.len() - 15) {
        let tail = &prefix[prefix.len() - 15..];
        let b = tail.as_bytes();
        let digits = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_digit);
        if b[0] == b'-' && digits(1..6) && tail[6..10].eq_ignore_ascii_case("-of-") && digits(10..15) {
            index = tail[1..6].parse().unwrap_or(1);
            count = tail[10..15].parse().unwrap_or(1);
            prefix = &prefix[..prefix.len() - 15];
        }
    }
    let tag = match prefix.rfind(['-', '.']) {
        Some(i) => {
            let t = &prefix[i + 1..];
            if !t.is_empty() && t.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_') {
                t.to_ascii_uppercase()
            } else {
                String::new()
            }
        }
        None => String::new(),
    };
    Some(SplitInfo { prefix: prefix.to_string(), tag, index, count })
}

/// True for a `.gguf` that holds model weights (not a projector, imatrix or draft/sidecar model).
pub fn is_model_file(path: &str) -> bool {
    if !path.to_ascii_lowercase().ends_with(".gguf") {
        return false;
    }
    let name = path.rsplit('/').next().unwrap_or(path);
    !["mmproj", "imatrix", "mtp-", "eagle3-", "dflash-", "dspark-"].iter().any(|k| name.contains(k))
}

/// True when a shard is the first of its model (or the file is not split).
fn is_first_shard(path: &str) -> bool {
    split_info(path).is_some_and(|s| s.count <= 1 || s.index == 1)
}

/// llama.cpp's rule: the path contains `tag` followed by `.` or `-`, ignoring case.
fn contains_tag(path: &str, tag: &str) -> bool {
    let path = path.to_ascii_lowercase();
    let tag = tag.to_ascii_lowercase();
    if tag.is_empty() {
        return false;
    }
    path.match_indices(&tag).any(|(i, _)| matches!(path.as_bytes().get(i + tag.len()), Some(b'.' | b'-')))
}

/// Quant tags of the model files in a listing (first shards only), sorted and deduplicated.
pub fn available_quants<S: AsRef<str>>(files: &[S]) -> Vec<String> {
    let mut tags: Vec<String> = files
        .iter()
        .map(AsRef::as_ref)
        .filter(|f| is_model_file(f) && is_first_shard(f))
        .filter_map(|f| split_info(f).map(|s| s.tag))
        .filter(|t| !t.is_empty())
        .collect();
    tags.sort();
    tags.dedup();
    tags
}

/// All `.gguf` paths of a listing, sorted: what error messages show.
pub fn gguf_files<S: AsRef<str>>(files: &[S]) -> Vec<String> {
    let mut v: Vec<String> = files
        .iter()
        .map(AsRef::as_ref)
        .filter(|f| f.to_ascii_lowercase().ends_with(".gguf"))
        .map(String::from)
        .collect();
    v.sort();
    v
}

/// Picks the primary model file for a tag (`None` = llama.cpp's default chain) from a sorted listing.
fn find_best_model<'a>(files: &[&'a str], tag: Option<&str>) -> Option<&'a str> {
    let tags: Vec<&str> = match tag {
        Some(t) => vec![t],
        None => vec![crate::model_ref::DEFAULT_QUANT, "Q8_0"],
    };
    let candidates: Vec<&str> = files.iter().copied().filter(|f| is_model_file(f) && is_first_shard(f)).collect();
    for t in &tags {
        let upper = t.to_ascii_uppercase();
        if let Some(f) = candidates.iter().find(|f| split_info(f).is_some_and(|s| s.tag == upper)) {
            return Some(f);
        }
        if let Some(f) = candidates.iter().find(|f| contains_tag(f, t)) {
            return Some(f);
        }
    }
    if tag.is_none() {
        return candidates.first().copied();
    }
    None
}

/// Returns every shard belonging to `primary` (just `primary` if unsplit), in shard order.
pub fn shards_of(repo: &str, files: &[&str], primary: &str) -> Result<Vec<String>, HubError> {
    let Some(info) = split_info(primary) else { return Ok(vec![primary.to_string()]) };
    if info.count <= 1 {
        return Ok(vec![primary.to_string()]);
    }
    let mut found: Vec<(u32, String)> = files
        .iter()
        .filter_map(|f| split_info(f).map(|s| (s, *f)))
        .filter(|(s, _)| s.count == info.count && s.prefix == info.prefix)
        .map(|(s, f)| (s.index, f.to_string()))
        .collect();
    found.sort();
    found.dedup_by_key(|(i, _)| *i);
    let missing: Vec<String> = (1..=info.count)
        .filter(|i| !found.iter().any(|(j, _)| j == i))
        .map(|i| format!("{}-{i:05}-of-{:05}.gguf", info.prefix, info.count))
        .collect();
    if !missing.is_empty() {
        let first = format!("{}-00001-of-{:05}.gguf", info.prefix, info.count);
        return Err(HubError::MissingShards { repo: repo.to_string(), first, missing });
    }
    Ok(found.into_iter().map(|(_, f)| f).collect())
}

/// Chooses the file(s) to fetch from a repo listing: all shards of the selected model, in order.
///
/// Errors name the quants and GGUF files that do exist.
pub fn select_files<S: AsRef<str>>(repo: &str, listing: &[S], selector: &Selector) -> Result<Vec<String>, HubError> {
    let mut files: Vec<&str> = listing.iter().map(AsRef::as_ref).collect();
    files.sort_unstable();
    files.dedup();
    let primary = match selector {
        Selector::File(path) => match files.iter().find(|f| **f == path.as_str()) {
            Some(f) => *f,
            None => {
                return Err(HubError::FileNotFound {
                    repo: repo.to_string(),
                    file: path.clone(),
                    available: gguf_files(&files),
                })
            }
        },
        Selector::Quant(tag) => find_best_model(&files, Some(tag)).ok_or_else(|| quant_error(repo, tag, &files))?,
        Selector::Default => {
            find_best_model(&files, None).ok_or_else(|| quant_error(repo, crate::model_ref::DEFAULT_QUANT, &files))?
        }
    };
    shards_of(repo, &files, primary)
}

fn quant_error(repo: &str, quant: &str, files: &[&str]) -> HubError {
    HubError::QuantNotFound {
        repo: repo.to_string(),
        quant: quant.to_string(),
        quants: available_quants(files),
        files: gguf_files(files),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_info_parses_shards_and_tags() {
        let s = split_info("Q4_K_M/Model-7B-Q4_K_M-00002-of-00003.gguf").unwrap_or_else(|| panic!("gguf"));
        assert_eq!((s.prefix.as_str(), s.tag.as_str(), s.index, s.count), ("Q4_K_M/Model-7B-Q4_K_M", "Q4_K_M", 2, 3));
        let s = split_info("qwen2.5-0.5b-instruct-q8_0.gguf").unwrap_or_else(|| panic!("gguf"));
        assert_eq!((s.tag.as_str(), s.index, s.count), ("Q8_0", 1, 1));
        assert_eq!(split_info("model.bin"), None);
        assert_eq!(split_info("model.gguf").map(|s| s.tag), Some(String::new()));
    }

    #[test]
    fn model_files_exclude_sidecars() {
        assert!(is_model_file("a/Model-Q4_K_M.gguf"));
        assert!(!is_model_file("mmproj-model-f16.gguf"));
        assert!(!is_model_file("Model.imatrix.gguf"));
        assert!(!is_model_file("README.md"));
    }
}
