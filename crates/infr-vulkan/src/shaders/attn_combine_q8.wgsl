// Decode-time fusion of `attention_combine.wgsl` with the int8 quantization of the attention
// output (the input of the output projection): a workgroup takes 256 consecutive elements of
// a token's output row (64 vec4s; a Q8_K scale group), merges their heads' split partials (or
// takes what the attention wrote directly when one split covered the context), writes them,
// and quantizes them (q8_block.wgsl). Its four sets of 64 invocations each merge every fourth
// split, then the first set merges the sets' results: a quarter of the serial reads.

struct Params {
    n_tokens: u32,
    n_head: u32,
    dv: u32,
    n_split: u32,
    window: u32,
    pos_off: u32,
    group: u32,
    scale_off: u32,
}

var<immediate> pc: Params;

@group(0) @binding(0) var<storage, read> PART: array<f32>;
@group(0) @binding(1) var<storage, read_write> O: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> S: array<u32>;
@group(0) @binding(3) var<storage, read_write> Q: array<u32>;
@group(0) @binding(4) var<storage, read_write> QS: array<vec4<f32>>;

const QWG: u32 = 256u;
// Sets of invocations that merge every SETS-th split.
const SETS: u32 = QWG / 64u;

// Each set's (max, sum) and output per vec4.
var<workgroup> set_ml: array<vec2<f32>, QWG>;
var<workgroup> set_o: array<vec4<f32>, QWG>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32, @builtin(subgroup_invocation_id) sgi: u32, @builtin(subgroup_id) sgid: u32, @builtin(subgroup_size) sgs: u32) {
    let u = lane_index(sgid, sgs, sgi);
    let set_i = u / 64u;
    let nv = pc.n_head * pc.dv / 4u;
    let per_tok = (nv + 63u) / 64u;
    let lin = wg_linear(wid, nwg);
    let tok = lin / per_tok;
    if tok >= pc.n_tokens {
        return;
    }
    let pos = S[pc.pos_off + tok];
    let keys = attn_keys(pos, S[pc.pos_off], S[pc.pos_off + pc.n_tokens - 1u], pc.window);
    let n_active = attn_splits_used(keys.y - keys.x, pc.n_split);
    let stride = pc.dv + 2u;
    let w = (lin % per_tok) * 64u + u % 64u;
    let valid = w < nv;
    let word = tok * nv + w;
    var v = vec4<f32>(0.0);
    if n_active <= 1u {
        if valid && set_i == 0u {
            v = O[word];
        }
    } else {
        var mx = -1e30;
        var l = 0.0;
        var a = vec4<f32>(0.0);
        if valid {
            let h = (4u * w) / pc.dv;
            let d = (4u * w) % pc.dv;
            let base = (tok * pc.n_head + h) * pc.n_split * stride;
            for (var s = set_i; s < n_active; s += SETS) {
                mx = max(mx, PART[base + s * stride]);
            }
            for (var s = set_i; s < n_active; s += SETS) {
                let r = base + s * stride;
                let e = exp(PART[r] - mx);
                l += PART[r + 1u] * e;
                a += vec4<f32>(PART[r + 2u + d], PART[r + 3u + d], PART[r + 4u + d], PART[r + 5u + d]) * e;
            }
        }
        set_ml[u] = vec2<f32>(mx, l);
        set_o[u] = a;
        workgroupBarrier();
        if valid && set_i == 0u {
            var m_all = mx;
            for (var k = 1u; k < SETS; k++) {
                m_all = max(m_all, set_ml[u + 64u * k].x);
            }
            var l_all = 0.0;
            var a_all = vec4<f32>(0.0);
            for (var k = 0u; k < SETS; k++) {
                let e = exp(set_ml[u + 64u * k].x - m_all);
                l_all += set_ml[u + 64u * k].y * e;
                a_all += set_o[u + 64u * k] * e;
            }
            v = a_all * (1.0 / l_all);
            O[word] = v;
        }
    }
    // Every invocation takes part (the quantization's reductions); the first set stores.
    quant_vec4(u, v, valid && set_i == 0u, word, pc.group, pc.scale_off, sgs);
}
