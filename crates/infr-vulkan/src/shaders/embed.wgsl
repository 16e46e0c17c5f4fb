// Embedding gather: Y[t, :] = dequant(W[token[t], :]) for tokens whose row lies in this chunk.

struct Params {
    cols: u32,
    row0: u32,
    rows: u32,
    soff: u32,
    n_tokens: u32,
    tok_off: u32,
}

var<immediate> pc: Params;

@group(0) @binding(0) var<storage, read> W: array<u32>;
@group(0) @binding(1) var<storage, read> S: array<u32>;
@group(0) @binding(2) var<storage, read_write> Y: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> TBL: array<u32>;

const QPB: u32 = BLOCK / 4u;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let g = wg_linear(wid, nwg) * 64u + li;
    let nq = pc.cols / 4u;
    let tok = g / nq;
    let q = g % nq;
    if tok >= pc.n_tokens {
        return;
    }
    let id = S[pc.tok_off + tok];
    if id < pc.row0 || id >= pc.row0 + pc.rows {
        return;
    }
    let blk = (id - pc.row0) * (pc.cols / BLOCK) + q / QPB;
    Y[tok * nq + q] = {{DEQ}}(blk * QW, pc.soff * 4u + blk * SB, q % QPB);
}
