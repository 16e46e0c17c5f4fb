// Chunked gated delta rule, pass 1 of 2 (the chunkwise form of Yang et al. 2024, "Gated
// Delta Networks"; llama.cpp `build_delta_net_chunking`): for each chunk of at most C tokens
// of a sequence's run (chunks end where the position is a multiple of C, so both passes find
// them alone) and each value head, with G_t the cumulative log decay within the chunk and
// b_t = sigmoid(beta_t):
//   A[t][s] = b_t e^(G_t - G_s) (k_t . k_s) for s < t,  T = (I + A)^-1 (unit lower triangular),
//   W_t = sum_s T[t][s] b_s e^(G_s) k_s,   U_t = sum_s T[t][s] b_s v_s,
//   P[t][s] = e^(G_t - G_s) (q_t . k_s) for s <= t.
// Pass 2 (`delta_chunked.wgsl`) then needs no token-by-token dependency inside a chunk: the
// pseudo-values are U_t - W_t S_j for each state row S_j. One workgroup per (token, head);
// those not at a chunk's first token exit. Scratch: W and U rows like V's ([token][head][D]),
// P rows of C, G per (token, head).

struct Params {
    n_tokens: u32,
    n_k_head: u32,
    n_v_head: u32,
    pos_off: u32,
    seq_off: u32,
    pad0: u32,
    pad1: u32,
    pad2: u32,
}

var<immediate> pc: Params;

@group(0) @binding(0) var<storage, read> Q: array<f32>;
@group(0) @binding(1) var<storage, read> K: array<f32>;
@group(0) @binding(2) var<storage, read> V: array<f32>;
@group(0) @binding(3) var<storage, read> A: array<f32>;
@group(0) @binding(4) var<storage, read> B: array<f32>;
@group(0) @binding(5) var<storage, read> DECAY: array<f32>;
@group(0) @binding(6) var<storage, read> STEP: array<u32>;
@group(0) @binding(7) var<storage, read_write> SCR: array<f32>;

const D: u32 = {{D}}u;
const C: u32 = {{C}}u;
const WG: u32 = 256u;

var<workgroup> g: array<f32, C>;
var<workgroup> bb: array<f32, C>;
var<workgroup> amat: array<f32, {{CC}}>;
var<workgroup> tmat: array<f32, {{CC}}>;
var<workgroup> chunk_len: u32;

// ggml_compute_softplus_f32.
fn softplus(x: f32) -> f32 {
    return select(log(1.0 + exp(x)), x, x > 20.0);
}

fn kdot(a: u32, b: u32) -> f32 {
    var acc = 0.0;
    for (var i = 0u; i < D; i++) {
        acc += K[a + i] * K[b + i];
    }
    return acc;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let wg = wg_linear(wid, nwg);
    let hv = pc.n_v_head;
    let t0 = wg / hv;
    let h = wg % hv;
    if li == 0u {
        var c = 0u;
        if t0 < pc.n_tokens {
            let s = STEP[pc.seq_off + t0];
            let first = t0 == 0u || STEP[pc.seq_off + t0 - 1u] != s || STEP[pc.pos_off + t0] % C == 0u;
            if first {
                c = 1u;
                while c < C && t0 + c < pc.n_tokens && STEP[pc.seq_off + t0 + c] == s && STEP[pc.pos_off + t0 + c] % C != 0u {
                    c++;
                }
            }
        }
        chunk_len = c;
    }
    let c = workgroupUniformLoad(&chunk_len);
    if c == 0u {
        return;
    }
    let kh = h % pc.n_k_head;
    let nt = pc.n_tokens;
    // Sections of the scratch: W, U, P, G.
    let w_off = 0u;
    let u_off = nt * hv * D;
    let p_off = 2u * nt * hv * D;
    let g_off = p_off + nt * hv * C;
    if li < c {
        let r = (t0 + li) * hv + h;
        g[li] = softplus(A[r]) * DECAY[h];
        bb[li] = 1.0 / (1.0 + exp(-B[r]));
    }
    workgroupBarrier();
    if li == 0u {
        for (var t = 1u; t < c; t++) {
            g[t] += g[t - 1u];
        }
    }
    workgroupBarrier();
    for (var x = li; x < C * C; x += WG) {
        let t = x / C;
        let s = x % C;
        var a = 0.0;
        if s < t && t < c {
            a = bb[t] * exp(g[t] - g[s]) * kdot(((t0 + t) * pc.n_k_head + kh) * D, ((t0 + s) * pc.n_k_head + kh) * D);
        }
        amat[x] = a;
    }
    workgroupBarrier();
    // T = (I + A)^-1, a column per invocation: T[t][s] = -sum_{r=s}^{t-1} A[t][r] T[r][s].
    if li < C {
        let s = li;
        for (var t = 0u; t < C; t++) {
            var v = select(0.0, 1.0, t == s);
            if t > s && t < c {
                for (var r = s; r < t; r++) {
                    v -= amat[t * C + r] * tmat[r * C + s];
                }
            }
            tmat[t * C + s] = v;
        }
    }
    workgroupBarrier();
    for (var x = li; x < c * D; x += WG) {
        let t = x / D;
        let i = x % D;
        var w = 0.0;
        var u = 0.0;
        for (var s = 0u; s <= t; s++) {
            let f = tmat[t * C + s] * bb[s];
            w += f * exp(g[s]) * K[((t0 + s) * pc.n_k_head + kh) * D + i];
            u += f * V[((t0 + s) * hv + h) * D + i];
        }
        let r = ((t0 + t) * hv + h) * D + i;
        SCR[w_off + r] = w;
        SCR[u_off + r] = u;
    }
    for (var x = li; x < c * C; x += WG) {
        let t = x / C;
        let s = x % C;
        var p = 0.0;
        if s <= t {
            let qa = ((t0 + t) * pc.n_k_head + kh) * D;
            let kb = ((t0 + s) * pc.n_k_head + kh) * D;
            var acc = 0.0;
            for (var i = 0u; i < D; i++) {
                acc += Q[qa + i] * K[kb + i];
            }
            p = exp(g[t] - g[s]) * acc;
        }
        SCR[p_off + ((t0 + t) * hv + h) * C + s] = p;
    }
    if li < c {
        SCR[g_off + (t0 + li) * hv + h] = g[li];
    }
}
