// Append the step's K and V rows to the paged cache: slot = pages[pos / page_size] * page_size
// + pos % page_size. One thread per pair of elements.

struct Params {
    kw: u32,
    vw: u32,
    n_tokens: u32,
    page_size: u32,
    pos_off: u32,
    pt_off: u32,
}

var<immediate> pc: Params;

@group(0) @binding(0) var<storage, read> K: array<f32>;
@group(0) @binding(1) var<storage, read> V: array<f32>;
@group(0) @binding(2) var<storage, read_write> KC: array<{{KV_TY}}>;
@group(0) @binding(3) var<storage, read_write> VC: array<{{KV_TY}}>;
@group(0) @binding(4) var<storage, read> S: array<u32>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let g = wg_linear(wid, nwg) * 64u + li;
    let per_tok = (pc.kw + pc.vw) / 2u;
    let tok = g / per_tok;
    if tok >= pc.n_tokens {
        return;
    }
    let p = g % per_tok;
    let pos = S[pc.pos_off + tok];
    let slot = S[S[pc.pt_off + tok] + pos / pc.page_size] * pc.page_size + pos % pc.page_size;
    if p < pc.kw / 2u {
        let e = 2u * p;
        let a = K[tok * pc.kw + e];
        let b = K[tok * pc.kw + e + 1u];
        {{STORE_K}}
    } else {
        let e = 2u * (p - pc.kw / 2u);
        let a = V[tok * pc.vw + e];
        let b = V[tok * pc.vw + e + 1u];
        {{STORE_V}}
    }
}
