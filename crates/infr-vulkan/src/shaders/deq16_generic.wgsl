// Sixteen consecutive elements of a weight row as f16 for the cooperative matmul's loaders,
// for any layout: four 4-element dequantizations (pseudo-blocks of plain float types hold 4).
// Elements past k are zeros.

fn deq16_generic(row_blk: u32, sb_base: u32, ke: u32) -> array<vec4<f16>, 4> {
    var out: array<vec4<f16>, 4>;
    for (var q = 0u; q < 4u; q++) {
        let e = ke + 4u * q;
        if e < pc.k {
            let blk = row_blk + e / BLOCK;
            out[q] = vec4<f16>({{DEQ}}(blk * QW, sb_base + blk * SB, (e % BLOCK) / 4u));
        } else {
            out[q] = vec4<f16>(0.0);
        }
    }
    return out;
}
