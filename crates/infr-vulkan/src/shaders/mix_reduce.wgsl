// The embedding mixture's partial sums (`mix_embed.wgsl`, one per slice of the vocabulary)
// added up: Y (+)= sum over slices of PART[s].

struct Params {
    // vec4 words of one slice's output (n_tokens * cols / 4).
    n_words: u32,
    slices: u32,
    // 0: the first chunk of the table writes; 1: later chunks add.
    accumulate: u32,
}

var<immediate> pc: Params;

@group(0) @binding(0) var<storage, read> PART: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> Y: array<vec4<f32>>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let o = wg_linear(wid, nwg) * 64u + li;
    if o >= pc.n_words {
        return;
    }
    var acc = vec4<f32>(0.0);
    for (var s = 0u; s < pc.slices; s++) {
        acc += PART[s * pc.n_words + o];
    }
    if pc.accumulate != 0u {
        Y[o] += acc;
    } else {
        Y[o] = acc;
    }
}
