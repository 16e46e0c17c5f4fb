//! Human-readable output: `infr config` ([`Resolved::explain`]) and the docs table ([`keys_table_markdown`]).

use crate::builder::{show, Resolved};
use crate::schema::KEYS;
use crate::value::type_name;

impl Resolved {
    /// The resolved configuration, one key per line with its source, in schema order:
    ///
    /// ```text
    /// context.size = 8192                      # env INFR_CTX
    /// server.api_key = "<redacted>"            # flag --api-key
    /// model.path_or_ref (unset)                # default
    /// ```
    pub fn explain(&self) -> String {
        let mut out = String::new();
        out.push_str("# infr configuration; precedence: default < file < env < --set/flags\n");
        match &self.file {
            Some(p) => out.push_str(&format!("# config file: {}\n", p.display())),
            None => out.push_str("# config file: none\n"),
        }
        let lines: Vec<(String, String)> = KEYS
            .iter()
            .map(|spec| match self.provenance.get(spec.key) {
                Some(e) => {
                    let v = if spec.secret { "\"<redacted>\"".to_string() } else { show(&e.value) };
                    (format!("{} = {v}", spec.key), e.source.to_string())
                }
                None => (format!("{} (unset)", spec.key), "default".to_string()),
            })
            .collect();
        let width = lines.iter().map(|(l, _)| l.len()).max().unwrap_or(0);
        for (l, src) in lines {
            out.push_str(&format!("{l:width$}  # {src}\n"));
        }
        for w in &self.warnings {
            out.push_str(&format!("# warning: {w}\n"));
        }
        out
    }
}

/// A markdown table of every key: key, type, default, environment variables, flag, description.
pub fn keys_table_markdown() -> String {
    let mut out = String::from("| Key | Type | Default | Env | Flag | Description |\n|---|---|---|---|---|---|\n");
    for k in KEYS {
        let default = if k.default.is_empty() { "unset".to_string() } else { format!("`{}`", k.default) };
        let env = k.env_names().iter().map(|e| format!("`{e}`")).collect::<Vec<_>>().join(", ");
        let flag = k.flag.map(|f| format!("`{f}`")).unwrap_or_else(|| "—".into());
        let doc = k.doc.replace('|', "\\|");
        out.push_str(&format!("| `{}` | {} | {default} | {env} | {flag} | {doc} |\n", k.key, type_name(&k.kind)));
    }
    out
}
