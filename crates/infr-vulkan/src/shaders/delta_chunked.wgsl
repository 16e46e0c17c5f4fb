// Chunked gated delta rule, pass 2 of 2 (pass 1: `delta_prep.wgsl`, which gives the chunk
// terms W, U, P and G). State rows are independent: as in `delta_net.wgsl`, a workgroup of
// ROWS x P threads takes ROWS rows of one head for a sequence's run, each row split over P
// adjacent lanes holding D / P of its elements in registers. Per chunk of c tokens and
// state row S_j (the state before the chunk):
//   u_t = U_t[j] - W_t . S_j                          (the chunk's pseudo-values)
//   o_t = scale (e^(G_t) q_t . S_j + sum_{s<=t} P[t][s] u_s)
//   S_j = e^(G_last) S_j + sum_s e^(G_last - G_s) u_s k_s
// so the products with S_j of a chunk's tokens are independent of each other.

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
@group(0) @binding(2) var<storage, read> SCR: array<f32>;
@group(0) @binding(3) var<storage, read> STEP: array<u32>;
@group(0) @binding(4) var<storage, read_write> STATE: array<f32>;
@group(0) @binding(5) var<storage, read_write> Y: array<f32>;

const D: u32 = {{D}}u;
const P: u32 = {{P}}u;
const DP: u32 = D / P;
const ROWS: u32 = {{ROWS}}u;
const C: u32 = {{C}}u;
// Row blocks of a head.
const RB: u32 = D / ROWS;


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
    let nt = pc.n_tokens;
    let u_off = nt * hv * D;
    let p_off = 2u * nt * hv * D;
    let g_off = p_off + nt * hv * C;
    let j = rb * ROWS + li / P;
    let part = li % P;
    let base = (STEP[pc.state_off + t0] * hv + h) * D * D + j * D + part;
    let fresh = STEP[pc.pos_off + t0] == 0u;
    var s: array<f32, DP>;
    for (var i = 0u; i < DP; i++) {
        s[i] = select(STATE[base + i * P], 0.0, fresh);
    }
    var u: array<f32, C>;
    var t = t0;
    while t < end {
        var c = 1u;
        while c < C && t + c < end && STEP[pc.pos_off + t + c] % C != 0u {
            c++;
        }
        for (var x = 0u; x < c; x++) {
            let r = ((t + x) * hv + h) * D;
            var acc = 0.0;
            for (var i = 0u; i < DP; i++) {
                acc += SCR[r + i * P + part] * s[i];
            }
            u[x] = SCR[u_off + r + j] - row_sum(acc);
        }
        for (var x = 0u; x < c; x++) {
            let q = ((t + x) * pc.n_k_head + kh) * D + part;
            var acc = 0.0;
            for (var i = 0u; i < DP; i++) {
                acc += Q[q + i * P] * s[i];
            }
            let r = (t + x) * hv + h;
            var o = exp(SCR[g_off + r]) * row_sum(acc);
            for (var y = 0u; y <= x; y++) {
                o += SCR[p_off + r * C + y] * u[y];
            }
            if part == 0u {
                Y[r * D + j] = o * pc.scale;
            }
        }
        let last = SCR[g_off + (t + c - 1u) * hv + h];
        for (var x = 0u; x < c; x++) {
            u[x] *= exp(last - SCR[g_off + (t + x) * hv + h]);
        }
        let decay = exp(last);
        for (var i = 0u; i < DP; i++) {
            var v = decay * s[i];
            for (var x = 0u; x < c; x++) {
                v += u[x] * K[((t + x) * pc.n_k_head + kh) * D + i * P + part];
            }
            s[i] = v;
        }
        t += c;
    }
    for (var i = 0u; i < DP; i++) {
        STATE[base + i * P] = s[i];
    }
}
