// Gated delta rule (Yang et al. 2024; llama.cpp `build_delta_net_autoregressive`), one token
// at a time: per value head h, with g = exp(softplus(alpha) * decay[h]), b = sigmoid(beta),
//   S = g S;  d = b (v - S^T k);  S = S + k d^T;  o = S^T q * scale.
// Rows of the D x D state (value index j, key index contiguous, as ggml stores it) are
// independent given k and q: a workgroup of ROWS x P threads takes ROWS rows of one head for
// the first row of a sequence's run, each row split over P adjacent lanes that keep D / P of
// its elements in registers (interleaved: lane p holds p, p + P, ...) and sum their partial
// dot products with subgroup shuffles (P = 1: one thread per row, no shuffles). Threads walk
// the run token by token; the state lives in the sequence's slot (zeros when the run starts
// at position 0). Workgroups of other rows exit.

struct Params {
    n_tokens: u32,
    n_k_head: u32,
    n_v_head: u32,
    scale: f32,
    pos_off: u32,
    seq_off: u32,
    state_off: u32,
    pad: u32,
}

var<immediate> pc: Params;

@group(0) @binding(0) var<storage, read> Q: array<f32>;
@group(0) @binding(1) var<storage, read> K: array<f32>;
@group(0) @binding(2) var<storage, read> V: array<f32>;
@group(0) @binding(3) var<storage, read> A: array<f32>;
@group(0) @binding(4) var<storage, read> B: array<f32>;
@group(0) @binding(5) var<storage, read> DECAY: array<f32>;
@group(0) @binding(6) var<storage, read> STEP: array<u32>;
@group(0) @binding(7) var<storage, read_write> STATE: array<f32>;
@group(0) @binding(8) var<storage, read_write> Y: array<f32>;

const D: u32 = {{D}}u;
const P: u32 = {{P}}u;
const DP: u32 = D / P;
const ROWS: u32 = {{ROWS}}u;
const WG: u32 = ROWS * P;
// Row blocks of a head.
const RB: u32 = D / ROWS;

var<workgroup> kq: array<f32, {{D2}}>;

// ggml_compute_softplus_f32.
fn softplus(x: f32) -> f32 {
    return select(log(1.0 + exp(x)), x, x > 20.0);
}

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let wg = wg_linear(wid, nwg);
    let hv = pc.n_v_head;
    let rb = wg % RB;
    let t0 = wg / RB / hv;
    let h = (wg / RB) % hv;
    let end = run_end_at(t0, li);
    if end == 0u {
        return;
    }
    let kh = h % pc.n_k_head;
    // This lane's state row and its first element.
    let j = rb * ROWS + li / P;
    let part = li % P;
    let base = (STEP[pc.state_off + t0] * hv + h) * D * D + j * D + part;
    let fresh = STEP[pc.pos_off + t0] == 0u;
    var s: array<f32, DP>;
    for (var i = 0u; i < DP; i++) {
        s[i] = select(STATE[base + i * P], 0.0, fresh);
    }
    for (var t = t0; t < end; t++) {
        let qk = (t * pc.n_k_head + kh) * D;
        for (var x = li; x < D; x += WG) {
            kq[x] = K[qk + x];
            kq[D + x] = Q[qk + x];
        }
        workgroupBarrier();
        let g = exp(softplus(A[t * hv + h]) * DECAY[h]);
        let b = 1.0 / (1.0 + exp(-B[t * hv + h]));
        var sk = 0.0;
        for (var i = 0u; i < DP; i++) {
            s[i] *= g;
            sk += s[i] * kq[i * P + part];
        }
        sk = row_sum(sk);
        let row = (t * hv + h) * D + j;
        let d = (V[row] - sk) * b;
        var o = 0.0;
        for (var i = 0u; i < DP; i++) {
            s[i] += kq[i * P + part] * d;
            o += s[i] * kq[D + i * P + part];
        }
        o = row_sum(o);
        if part == 0u {
            Y[row] = o * pc.scale;
        }
        workgroupBarrier();
    }
    for (var i = 0u; i < DP; i++) {
        STATE[base + i * P] = s[i];
    }
}
