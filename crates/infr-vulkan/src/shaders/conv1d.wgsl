// Causal depthwise convolution with a per-sequence window (`ggml_ssm_conv`, then SiLU if
// asked): out[t, c] = sum_j W[c, j] * in[t - (K - 1) + j, c], where inputs before the step
// come from the sequence's state slot (zeros when it starts at position 0), which is then
// overwritten with the last K - 1 inputs. Two dispatches of this file: PHASE 0 computes the
// outputs, one thread per (token, channel); PHASE 1 (after it, as it overwrites the state
// the first reads) moves each run's window into its state slot, one thread per (first row of
// a sequence's run, channel). PHASE 2 does both in one dispatch for steps of short runs
// (decode): one thread per (first row of a run, channel) walks its run, keeping the window in
// registers, then stores it.

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

const PHASE: u32 = {{PHASE}}u;

// Input x of channel c that the window of a run starting at row t0 sees at step index u + h
// (u < h: the state's slots, zeros for a fresh sequence; then rows t0, t0 + 1, ...), with
// h = K - 1 and the state slot at `base`.
fn window_input(u: u32, h: u32, t0: u32, c: u32, base: u32, fresh: bool) -> f32 {
    if u >= h {
        return X[(t0 + u - h) * pc.channels + c];
    }
    return select(STATE[base + u * pc.channels + c], 0.0, fresh);
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let i = wg_linear(wid, nwg) * 64u + li;
    let C = pc.channels;
    if i >= pc.n_tokens * C {
        return;
    }
    let t = i / C;
    let c = i % C;
    let s = STEP[pc.seq_off + t];
    let h = pc.kernel - 1u;
    if PHASE == 0u {
        // The run's first row, if it is among the h rows before t.
        var t0 = t;
        while t0 > 0u && t - t0 < h && STEP[pc.seq_off + t0 - 1u] == s {
            t0--;
        }
        let base = STEP[pc.state_off + t0] * pc.slot_floats;
        let fresh = STEP[pc.pos_off + t0] == 0u;
        // Window position of row t is (t - t0) + h; its taps are the h before it and itself.
        var acc = 0.0;
        for (var j = 0u; j <= h; j++) {
            acc += window_input(t - t0 + j, h, t0, c, base, fresh) * W[c * pc.kernel + j];
        }
        if pc.silu != 0u {
            acc = acc / (1.0 + exp(-acc));
        }
        Y[t * C + c] = acc;
        return;
    }
    if t > 0u && STEP[pc.seq_off + t - 1u] == s {
        return;
    }
    if PHASE == 2u {
        let base = STEP[pc.state_off + t] * pc.slot_floats;
        let fresh = STEP[pc.pos_off + t] == 0u;
        // win[j]: the input j + 1 steps before the next one (the state's order reversed).
        var win: array<f32, {{MAXK}}>;
        for (var j = 0u; j < h; j++) {
            win[j] = select(STATE[base + (h - 1u - j) * C + c], 0.0, fresh);
        }
        var u = t;
        loop {
            let x = X[u * C + c];
            // Oldest input first, as PHASE 0 sums.
            var acc = 0.0;
            for (var j = 0u; j < h; j++) {
                acc += win[h - 1u - j] * W[c * pc.kernel + j];
            }
            acc += x * W[c * pc.kernel + h];
            if pc.silu != 0u {
                acc = acc / (1.0 + exp(-acc));
            }
            Y[u * C + c] = acc;
            if h > 0u {
                for (var j = h - 1u; j > 0u; j--) {
                    win[j] = win[j - 1u];
                }
                win[0] = x;
            }
            u++;
            if u >= pc.n_tokens || STEP[pc.seq_off + u] != s {
                break;
            }
        }
        for (var j = 0u; j < h; j++) {
            STATE[base + (h - 1u - j) * C + c] = win[j];
        }
        return;
    }
    var len = 1u;
    while t + len < pc.n_tokens && STEP[pc.seq_off + t + len] == s {
        len++;
    }
    let base = STEP[pc.state_off + t] * pc.slot_floats;
    let fresh = STEP[pc.pos_off + t] == 0u;
    // The new window: the last h of [old window, the run's inputs], read before any write.
    var win: array<f32, {{MAXK}}>;
    for (var j = 0u; j < h; j++) {
        win[j] = window_input(len + j, h, t, c, base, fresh);
    }
    for (var j = 0u; j < h; j++) {
        STATE[base + j * C + c] = win[j];
    }
}
