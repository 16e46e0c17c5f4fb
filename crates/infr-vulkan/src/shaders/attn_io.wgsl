// Push constants (`AttnParamsGpu`) and bindings shared by the attention kernels
// (attention.wgsl, attention_coop.wgsl, attention_gqa.wgsl): queries, the paged K/V cache, step inputs, output,
// split partials, sinks.

struct Params {
    n_head: u32,
    group: u32,
    dk: u32,
    dv: u32,
    scale: f32,
    softcap: f32,
    window: u32,
    page_size: u32,
    kw: u32,
    vw: u32,
    n_tokens: u32,
    pos_off: u32,
    pt_off: u32,
    round_q: u32,
    n_split: u32,
    flash_rows: u32,
    has_sinks: u32,
}

var<immediate> pc: Params;

@group(0) @binding(0) var<storage, read> Q: array<f32>;
@group(0) @binding(1) var<storage, read> KC: array<{{K_TY}}>;
@group(0) @binding(2) var<storage, read> VC: array<{{V_TY}}>;
@group(0) @binding(3) var<storage, read> S: array<u32>;
@group(0) @binding(4) var<storage, read_write> O: array<f32>;
@group(0) @binding(5) var<storage, read_write> PART: array<f32>;
// Per-head sink logits (gpt-oss), read when has_sinks: a key with no value in every row's
// softmax, entered as the row's starting maximum with a sum of 1.
@group(0) @binding(6) var<storage, read> SINKS: array<f32>;

// The keys of split `split` of token `tok`'s row (every key of it when n_split is 1): first,
// end, and the splits the row uses (the others have no keys).
fn split_keys(tok: u32, split: u32) -> vec3<u32> {
    let keys = attn_keys(S[pc.pos_off + tok], S[pc.pos_off], S[pc.pos_off + pc.n_tokens - 1u], pc.window);
    let chunk = attn_chunk(keys.y - keys.x, pc.n_split);
    let begin = keys.x + split * chunk;
    return vec3<u32>(begin, min(begin + chunk, keys.y), attn_splits_used(keys.y - keys.x, pc.n_split));
}

// The cache slot of key position j of a sequence whose page table starts at S[pt].
fn key_slot(pt: u32, j: u32) -> u32 {
    return S[pt + j / pc.page_size] * pc.page_size + j % pc.page_size;
}
