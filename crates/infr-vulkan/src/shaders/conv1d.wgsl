// Causal depthwise convolution with a per-sequence window (`ggml_ssm_conv`, then SiLU if
// asked): out[t, c] = sum_j W[c, j] * in[t - (K - 1) + j, c], where inputs before the step
// come from the sequence's state slot (zeros when it starts at position 0), which is then
// overwritten with the last K - 1 inputs. One thread per (first row of a sequence's run,
// channel) walks the run; threads of other rows exit.

struct Params {
    n_tokens: u32,
    channels: u32,
    kernel: u32,
    silu: u32,
    pos_off: u32,
    seq_off: u32,
    state_off: u32,
    slot_floats: u32,
}

var<immediate> pc: Params;

@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<storage, read> W: array<f32>;
@group(0) @binding(2) var<storage, read> STEP: array<u32>;
@group(0) @binding(3) var<storage, read_write> STATE: array<f32>;
@group(0) @binding(4) var<storage, read_write> Y: array<f32>;

const MAXK: u32 = {{MAXK}}u;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let i = wg_linear(wid, nwg) * 64u + li;
    let C = pc.channels;
    if i >= pc.n_tokens * C {
        return;
    }
    let t0 = i / C;
    let c = i % C;
    let s = STEP[pc.seq_off + t0];
    if t0 > 0u && STEP[pc.seq_off + t0 - 1u] == s {
        return;
    }
    let h = pc.kernel - 1u;
    let base = STEP[pc.state_off + t0] * pc.slot_floats;
    let fresh = STEP[pc.pos_off + t0] == 0u;
    var win: array<f32, MAXK>;
    for (var j = 0u; j < h; j++) {
        win[j] = select(STATE[base + j * C + c], 0.0, fresh);
    }
    var t = t0;
    loop {
        if t >= pc.n_tokens || STEP[pc.seq_off + t] != s {
            break;
        }
        let x = X[t * C + c];
        var acc = 0.0;
        for (var j = 0u; j < h; j++) {
            acc += win[j] * W[c * pc.kernel + j];
        }
        acc += x * W[c * pc.kernel + h];
        if h > 0u {
            for (var j = 0u; j + 1u < h; j++) {
                win[j] = win[j + 1u];
            }
            win[h - 1u] = x;
        }
        if pc.silu != 0u {
            acc = acc / (1.0 + exp(-acc));
        }
        Y[t * C + c] = acc;
        t++;
    }
    for (var j = 0u; j < h; j++) {
        STATE[base + j * C + c] = win[j];
    }
}
