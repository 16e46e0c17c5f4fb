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
// q, k and v are read at a row stride and column offset, so that they may be column slices
// of one tensor (the convolution's output) read in place; with L2, q and k are normalised
// per head as they are used (llama.cpp `build_gdn_l2_norm`: x * mult / sqrt(sum x^2 + eps)):
// S^T k_hat = (S^T k) * rk and k_hat d^T = k (rk d), rk from the same lanes' partial sums.

struct Params {
    n_tokens: u32,
    n_k_head: u32,
    n_v_head: u32,
    scale: f32,
    pos_off: u32,
    seq_off: u32,
    state_off: u32,
    pad: u32,
    qk_stride: u32,
    v_stride: u32,
    q_off: u32,
    k_off: u32,
    v_off: u32,
    pad2: u32,
    q_mult: f32,
    q_eps: f32,
    k_mult: f32,
    k_eps: f32,
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
const L2: bool = {{L2}};
// Row blocks of a head.
const RB: u32 = D / ROWS;

// Tokens whose inputs the workgroup stages at once: each token's k | q (shared by all rows),
// each of the workgroup's rows' v, and the head's decay factor and beta gate. The threads load
// a block together (every load issued before any is waited on), then walk its tokens with no
// barrier between them: one pair of barriers per TB tokens. Staging a token at a time cost two
// barriers and a global load's latency per token (~1 µs a token on an H100: 0.55 ms a layer at
// 512 tokens).
const TB: u32 = {{TB}}u;

var<workgroup> kq: array<f32, {{KQ}}>;
var<workgroup> vrow: array<f32, {{VR}}>;
var<workgroup> gate: array<vec2<f32>, TB>;

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
    let decay = DECAY[h];
    let row = li / P;
    for (var t1 = t0; t1 < end; t1 += TB) {
        let nb = min(TB, end - t1);
        for (var x = li; x < nb * D; x += WG) {
            let u = x / D;
            let e = x % D;
            let qk = (t1 + u) * pc.qk_stride + kh * D;
            kq[2u * D * u + e] = K[qk + pc.k_off + e];
            kq[2u * D * u + D + e] = Q[qk + pc.q_off + e];
        }
        for (var x = li; x < nb * ROWS; x += WG) {
            let u = x / ROWS;
            vrow[x] = V[(t1 + u) * pc.v_stride + pc.v_off + h * D + rb * ROWS + x % ROWS];
        }
        if li < nb {
            let r = (t1 + li) * hv + h;
            gate[li] = vec2(exp(softplus(A[r]) * decay), 1.0 / (1.0 + exp(-B[r])));
        }
        workgroupBarrier();
        for (var u = 0u; u < nb; u++) {
            let kb = 2u * D * u;
            let g = gate[u].x;
            let b = gate[u].y;
            var sk = 0.0;
            var kk = 0.0;
            for (var i = 0u; i < DP; i++) {
                let kx = kq[kb + i * P + part];
                s[i] *= g;
                sk += s[i] * kx;
                kk += kx * kx;
            }
            var rk = 1.0;
            if L2 {
                let r = row_sum2(vec2(sk, kk));
                rk = pc.k_mult / sqrt(r.y + pc.k_eps);
                sk = r.x * rk;
            } else {
                sk = row_sum(sk);
            }
            let d = (vrow[u * ROWS + row] - sk) * b;
            let dk = d * rk;
            var o = 0.0;
            var qq = 0.0;
            for (var i = 0u; i < DP; i++) {
                let qx = kq[kb + D + i * P + part];
                s[i] += kq[kb + i * P + part] * dk;
                o += s[i] * qx;
                qq += qx * qx;
            }
            if L2 {
                let r = row_sum2(vec2(o, qq));
                o = r.x * pc.q_mult / sqrt(r.y + pc.q_eps);
            } else {
                o = row_sum(o);
            }
            if part == 0u {
                Y[((t1 + u) * hv + h) * D + j] = o * pc.scale;
            }
        }
        workgroupBarrier();
    }
    for (var i = 0u; i < DP; i++) {
        STATE[base + i * P] = s[i];
    }
}
