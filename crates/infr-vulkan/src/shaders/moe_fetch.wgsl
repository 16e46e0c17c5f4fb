// Copies of experts from host memory into the expert cache's device slots, as
// `moe_cache.wgsl` listed them: each workgroup copies one piece of PIECE words of one copy's
// expert, from its quant plane then its scale plane (the two planes of the repacked tensor;
// an expert's rows are contiguous in each). Workgroups past the step's copies exit.

struct Params {
    /// Words of one expert in the quant plane and in the scale plane.
    q_words: u32,
    s_words: u32,
    /// Word offsets of the scale planes in the source tensor and in the slot buffer.
    src_soff: u32,
    dst_soff: u32,
    /// Workgroups per copy.
    pieces: u32,
}

var<immediate> pc: Params;

@group(0) @binding(0) var<storage, read> SRC: array<u32>;
@group(0) @binding(1) var<storage, read_write> DST: array<u32>;
@group(0) @binding(2) var<storage, read> JOBS: array<u32>;

const WG: u32 = 256u;
const PIECE: u32 = {{PIECE}}u;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let g = wg_linear(wid, nwg);
    let job = g / pc.pieces;
    if job >= JOBS[0] {
        return;
    }
    let e = JOBS[1u + 2u * job];
    let s = JOBS[2u + 2u * job];
    let total = pc.q_words + pc.s_words;
    let first = (g % pc.pieces) * PIECE;
    let last = min(first + PIECE, total);
    for (var w = first + li; w < last; w += WG) {
        if w < pc.q_words {
            DST[s * pc.q_words + w] = SRC[e * pc.q_words + w];
        } else {
            let j = w - pc.q_words;
            DST[pc.dst_soff + s * pc.s_words + j] = SRC[pc.src_soff + e * pc.s_words + j];
        }
    }
}
