//! CPU implementations of the graph ops.

pub(crate) mod attention;
pub(crate) mod elementwise;
pub(crate) mod moe;
pub(crate) mod norm;
pub(crate) mod recurrent;
pub(crate) mod rope;
