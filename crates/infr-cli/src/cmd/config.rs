//! `infr config`: the resolved configuration and where each value came from.

use std::path::PathBuf;

use anyhow::Result;

/// Arguments of `infr config`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Config file to read instead of the discovered one (`./infr.toml`, `$XDG_CONFIG_HOME/infr/config.toml`).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Override a key: `--set context.size=8192` (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
    /// Print the table of every key (markdown) instead.
    #[arg(long)]
    pub keys: bool,
}

/// Run `infr config`.
pub fn run(a: Args) -> Result<()> {
    if a.keys {
        print!("{}", infr_config::keys_table_markdown());
        return Ok(());
    }
    let resolved = infr_config::ConfigBuilder::new().file(a.config).set_args(&a.sets).resolve()?;
    print!("{}", resolved.explain());
    Ok(())
}
