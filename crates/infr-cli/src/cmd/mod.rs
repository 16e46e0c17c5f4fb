//! One module per subcommand.

pub mod bench;
pub mod compare;
pub mod config;
pub mod devices;
pub mod diffusion;
pub mod eval;
pub mod inspect;
pub mod multi;
pub mod pull;
pub mod run;
pub mod serve;
pub mod synth;
pub mod tokenize;
