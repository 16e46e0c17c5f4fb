// A gated activation fused with the int8 quantization of its result (decode: the input of
// the down projection): Y = act(A) * B elementwise, then Q/QS from Y (q8_block.wgsl).
// 64 invocations per workgroup, one vec4 each. With `ab_words` set, A and B are the two
// halves of each row of one buffer (gate | up, `ab_words` words each, as the expert FFNs
// write them) and Y has rows of one half. Otherwise A and B may each be the partial-product
// planes of a split-K matmul (`*_parts` planes, `*_stride` vec4s apart), summed here in
// split_reduce.wgsl's order instead of by a reduction dispatch. With `b_row_words` set, B is a
// column slice of a wider tensor (rows of that many vec4s; periods of `b_period_words` vec4s,
// of which `b_len_words` from vec4 `b_off_words` are the slice's), read in place (Gemma 4's
// per-layer input of one layer); the same for A with `a_row_words` (Qwen3.5's attention gate,
// the second half of each head's query | gate period). With NORM, B is RMS-normed over groups of
// `b_norm_words` vec4s (aligned in the workgroup's 64) times a per-element weight W first
// (Qwen3.5's gated norm: silu(z) * rms_norm(o) * w, per head of o).

struct Params {
    n_words: u32,
    group: u32,
    scale_off: u32,
    ab_words: u32,
    a_parts: u32,
    a_stride: u32,
    b_parts: u32,
    b_stride: u32,
    row_words: u32,
    b_row_words: u32,
    b_off_words: u32,
    b_norm_words: u32,
    b_norm_eps: f32,
    b_len_words: u32,
    b_period_words: u32,
    a_row_words: u32,
    a_len_words: u32,
    a_period_words: u32,
    a_off_words: u32,
}

var<immediate> pc: Params;

@group(0) @binding(0) var<storage, read> A: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> B: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> Y: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> Q: array<{{Q_ELEM}}>;
@group(0) @binding(4) var<storage, read_write> QS: array<vec4<f32>>;

const QWG: u32 = 64u;
const NORM: bool = {{NORM}};
{{NORM_DECL}}
var<workgroup> norm_ss: array<f32, 64>;

// Element vec4 i of A / B: the sum of its planes, in order.
fn sum_a(i: u32) -> vec4<f32> {
    var v = A[i];
    for (var p = 1u; p < pc.a_parts; p++) {
        v += A[p * pc.a_stride + i];
    }
    return v;
}

fn sum_b(i: u32) -> vec4<f32> {
    var v = B[i];
    for (var p = 1u; p < pc.b_parts; p++) {
        v += B[p * pc.b_stride + i];
    }
    return v;
}

// vec4 w of Y read from a column slice of a wider tensor: rows of `in_row` vec4s, periods of
// `period` holding the slice's `len` vec4s from `off`.
fn slice_word(w: u32, in_row: u32, len: u32, period: u32, off: u32) -> u32 {
    let cw = w % pc.row_words;
    return (w / pc.row_words) * in_row + (cw / len) * period + off + cw % len;
}

fn op(a: f32, b: f32) -> f32 {
    {{OP}}
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32, @builtin(subgroup_invocation_id) sgi: u32, @builtin(subgroup_id) sgid: u32, @builtin(subgroup_size) sgs: u32) {
    let u = lane_index(sgid, sgs, sgi);
    let w = 64u * wg_linear(wid, nwg) + u;
    let valid = w < pc.n_words;
    var v = vec4<f32>(0.0);
    var a = vec4<f32>(0.0);
    var b = vec4<f32>(0.0);
    if valid {
        var ia = w;
        var ib = w;
        if pc.ab_words != 0u {
            ia = (w / pc.ab_words) * 2u * pc.ab_words + w % pc.ab_words;
            ib = ia + pc.ab_words;
        }
        if pc.a_row_words != 0u {
            ia = slice_word(w, pc.a_row_words, pc.a_len_words, pc.a_period_words, pc.a_off_words);
        }
        if pc.b_row_words != 0u {
            ib = slice_word(w, pc.b_row_words, pc.b_len_words, pc.b_period_words, pc.b_off_words);
        }
        a = sum_a(ia);
        b = sum_b(ib);
    }
    if NORM {
        // Sum of squares over this word's group: each lane's own, then its group's lanes.
        let gw = pc.b_norm_words;
        norm_ss[u] = dot(b, b);
        workgroupBarrier();
        let g0 = (u / gw) * gw;
        var total = 0.0;
        for (var k = 0u; k < gw; k++) {
            total += norm_ss[g0 + k];
        }
        b *= norm_weight(w % gw) / sqrt(total / f32(4u * gw) + pc.b_norm_eps);
    }
    if valid {
        v = vec4<f32>(op(a.x, b.x), op(a.y, b.y), op(a.z, b.z), op(a.w, b.w));
        Y[w] = v;
    }
    {{QUANT}}(u, v, valid, w, pc.group, pc.scale_off, sgs);
}
