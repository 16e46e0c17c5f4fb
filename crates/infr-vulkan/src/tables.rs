//! Lookup tables of the i-quants (grids, sign patterns, non-linear values), uploaded once as
//! one storage buffer of u32 words; shaders find each table at a templated word offset.

use infr_quant::{iq1_tables, iq_tables};

/// (template key, words) of every table, in buffer order.
fn parts() -> Vec<(&'static str, Vec<u32>)> {
    let u64s = |t: &[u64]| t.iter().flat_map(|&v| [v as u32, (v >> 32) as u32]).collect::<Vec<u32>>();
    let bytes = |t: &[u8]| {
        t.chunks(4)
            .map(|c| c.iter().enumerate().fold(0u32, |w, (i, &b)| w | (b as u32) << (8 * i)))
            .collect::<Vec<u32>>()
    };
    let ibytes = |t: &[i8]| bytes(&t.iter().map(|&v| v as u8).collect::<Vec<u8>>());
    vec![
        ("T_IQ2XXS", u64s(&iq_tables::IQ2XXS_GRID)),
        ("T_IQ2XS", u64s(&iq_tables::IQ2XS_GRID)),
        ("T_IQ2S", u64s(&iq_tables::IQ2S_GRID)),
        ("T_IQ3XXS", iq_tables::IQ3XXS_GRID.to_vec()),
        ("T_IQ3S", iq_tables::IQ3S_GRID.to_vec()),
        ("T_IQ1S", u64s(&iq1_tables::IQ1S_GRID)),
        ("T_KSIGNS", bytes(&iq_tables::KSIGNS_IQ2XS)),
        ("T_IQ4NL", ibytes(&iq_tables::KVALUES_IQ4NL)),
    ]
}

/// The whole table buffer.
pub fn words() -> Vec<u32> {
    parts().into_iter().flat_map(|(_, w)| w).collect()
}

/// `(key, "<offset>u")` template values for the shaders.
pub fn defines() -> Vec<(&'static str, String)> {
    let mut off = 0usize;
    parts()
        .into_iter()
        .map(|(k, w)| {
            let d = (k, format!("{off}u"));
            off += w.len();
            d
        })
        .collect()
}
