// Embedding mixture: Y[t, :] = sum over this chunk's rows v of P[t, v] * dequant(W[v, :]),
// DiffusionGemma's self-conditioning (the expected embedding under the previous step's
// probabilities). P is the step's mixture buffer: word 0 is 1 when a mixture was given (else
// the output is zeros), then n_tokens rows of n_vocab f32. Each invocation owns 4 columns of up
// to TT tokens and walks one slice of the chunk's rows, so a table row is dequantized once per
// tile; slices (split-K: a 262,144-row vocabulary would leave a GPU mostly idle) write partial
// sums that `mix_reduce.wgsl` adds up.

struct Params {
    cols: u32,
    row0: u32,
    rows: u32,
    soff: u32,
    n_tokens: u32,
    n_vocab: u32,
    // Rows per slice; partial sums of slice s go to PART[s].
    slice_rows: u32,
}

var<immediate> pc: Params;

@group(0) @binding(0) var<storage, read> W: array<u32>;
@group(0) @binding(1) var<storage, read> P: array<f32>;
@group(0) @binding(2) var<storage, read_write> PART: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> TBL: array<u32>;

const QPB: u32 = BLOCK / 4u;
const TT: u32 = {{TT}}u;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let g = wg_linear(wid, nwg) * 64u + li;
    let nq = pc.cols / 4u;
    let tiles = (pc.n_tokens + TT - 1u) / TT;
    let slice = g / (nq * tiles);
    let tile = (g / nq) % tiles;
    let q = g % nq;
    let r0 = slice * pc.slice_rows;
    let r1 = min(r0 + pc.slice_rows, pc.rows);
    let t0 = tile * TT;
    // Past the last slice (no slice is empty): the last workgroup's spare invocations.
    if r0 >= pc.rows || t0 >= pc.n_tokens {
        return;
    }
    let nt = min(TT, pc.n_tokens - t0);
    var acc: array<vec4<f32>, TT>;
    for (var i = 0u; i < TT; i++) {
        acc[i] = vec4<f32>(0.0);
    }
    let given = bitcast<u32>(P[0]) != 0u;
    if given {
        for (var r = r0; r < r1; r++) {
            let v = pc.row0 + r;
            let blk = r * (pc.cols / BLOCK) + q / QPB;
            let w = {{DEQ}}(blk * QW, pc.soff * 4u + blk * SB, q % QPB);
            // A fixed trip count keeps acc in registers; rows past the last token repeat it.
            for (var i = 0u; i < TT; i++) {
                acc[i] += P[1u + min(t0 + i, pc.n_tokens - 1u) * pc.n_vocab + v] * w;
            }
        }
    }
    for (var i = 0u; i < TT; i++) {
        if i < nt {
            PART[(slice * pc.n_tokens + t0 + i) * nq + q] = acc[i];
        }
    }
}
