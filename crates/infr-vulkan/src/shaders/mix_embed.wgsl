// Embedding mixture: Y[t, :] (+)= sum over this chunk's rows v of P[t, v] * dequant(W[v, :]),
// DiffusionGemma's self-conditioning (the expected embedding under the previous step's
// probabilities). P is the step's mixture buffer: word 0 is 1 when a mixture was given (else
// the output is zeros), then n_tokens rows of n_vocab f32. Each invocation owns 4 columns of up
// to TT tokens and walks the chunk's rows once, so a table row is dequantized once per tile.

struct Params {
    cols: u32,
    row0: u32,
    rows: u32,
    soff: u32,
    n_tokens: u32,
    n_vocab: u32,
    // 0: the first chunk writes; 1: later chunks add.
    accumulate: u32,
}

var<immediate> pc: Params;

@group(0) @binding(0) var<storage, read> W: array<u32>;
@group(0) @binding(1) var<storage, read> P: array<f32>;
@group(0) @binding(2) var<storage, read_write> Y: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> TBL: array<u32>;

const QPB: u32 = BLOCK / 4u;
const TT: u32 = 8u;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let g = wg_linear(wid, nwg) * 64u + li;
    let nq = pc.cols / 4u;
    let tile = g / nq;
    let q = g % nq;
    let t0 = tile * TT;
    if t0 >= pc.n_tokens {
        return;
    }
    let nt = min(TT, pc.n_tokens - t0);
    var acc: array<vec4<f32>, 8>;
    for (var i = 0u; i < TT; i++) {
        acc[i] = vec4<f32>(0.0);
    }
    let given = bitcast<u32>(P[0]) != 0u;
    if given {
        for (var r = 0u; r < pc.rows; r++) {
            let v = pc.row0 + r;
            let blk = r * (pc.cols / BLOCK) + q / QPB;
            let w = {{DEQ}}(blk * QW, pc.soff * 4u + blk * SB, q % QPB);
            for (var i = 0u; i < nt; i++) {
                acc[i] += P[1u + (t0 + i) * pc.n_vocab + v] * w;
            }
        }
    }
    for (var i = 0u; i < nt; i++) {
        let o = (t0 + i) * nq + q;
        if pc.accumulate != 0u {
            Y[o] += acc[i];
        } else {
            Y[o] = acc[i];
        }
    }
}
