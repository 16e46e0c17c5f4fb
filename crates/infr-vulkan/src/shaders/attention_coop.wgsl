// Cooperative-matrix attention for prefill over the paged f16 or q8_0 KV cache. A workgroup takes
// BR = 4·F consecutive tokens of one head (F = the fragment edge, 16 or 8), four subgroups
// of F query rows each; keys come in tiles of BC = 2·F shared by the whole workgroup. One
// pass over the keys with an online softmax (Milakov & Gimelshein 2018, as FlashAttention-2
// uses it) whose offset moves lazily: a tile's probabilities are exp(s − c) for a per-row
// offset c that is raised only when a score exceeds it by more than RESCALE_AT, so that the
// f32 cooperative-matrix outputs (which have no per-row scaling) are rescaled through
// workgroup memory only on those rare tiles, not on every one; the outputs are divided by
// the row sums at the end (softmax is exact for any offset: exp(s − c) / Σ exp(s − c)).
// (With two passes, max and sum first and then O, the 8B pp512 attention took 37.7 ms of an
// H200 profile, and 26.0 ms when the first pass was skipped.) The cache slots of a tile's
// keys (a table in workgroup memory) are looked up while the previous tile is staged, and
// its K and V words are read while the previous tile is multiplied; K and V rows are staged
// 8 dims (16 bytes) at a time into row-major tiles, which S = Q·Kᵀ reads as a column-major
// operand and P·V as a row-major one. A row is handled here only when its sequence's page
// table is that of the block's first token and the block's second token's (a prefill chunk
// of one sequence); `attention.wgsl` runs after this kernel and computes exactly the other
// rows.

enable f16;
enable wgpu_cooperative_matrix;

const WG: u32 = {{WG}}u;
const SGS: u32 = {{SGS}}u;
const F: u32 = {{F}}u;
// Lanes per query row in the softmax passes.
const LPR: u32 = SGS / F;
const D: u32 = {{D}}u;
const BR: u32 = 4u * F;
const BC: u32 = 2u * F;
// Row stride (f16) of staged Q, K and V rows: D plus 8 to spread the banks.
const KS: u32 = D + 8u;
const VOFF: u32 = BC * KS;
// 16-byte units per row of a head.
const D8: u32 = D / 8u;
const NO_SLOT: u32 = 0xffffffffu;
// How far (in natural-log units) a score may exceed its row's offset before the offset is
// raised: probabilities stay below e^8 ≈ 2981, well inside f16.
const RESCALE_AT: f32 = 8.0;

// K tile then V tile (row-major, stride KS); at the start, the block's query rows
// (BR·KS ≤ 2·BC·KS).
var<workgroup> kv: array<f16, {{KV_LEN}}>;
// Per subgroup: an F×BC f32 score tile, column-major (two F×F fragments), and the F×F
// output staging at the end.
var<workgroup> ss: array<f32, {{SS_LEN}}>;
// Per subgroup: F×BC f16 probabilities, row-major.
var<workgroup> ps: array<f16, {{SS_LEN}}>;
// Per subgroup and row: the factor its outputs are multiplied by (a rescale, or 1 / the row
// sum at the end).
var<workgroup> row_scale: array<f32, 4 * F>;
// Per subgroup: 1 when some row of it must rescale its outputs this tile.
var<workgroup> rescale_flags: vec4<u32>;
// Cache slot of each key of the tile (NO_SLOT past the block's last key), in two halves: the
// next tile's slots are looked up while this tile's K and V rows are copied.
var<workgroup> slots: array<u32, 2 * BC>;
// The block's key range: x the first key (atomic min), y the end (atomic max). Every
// workgroup variable is a multiple of 16 bytes so that the f16/f32 tiles stay 16-byte
// aligned, as cooperative-matrix loads and stores require (VUID-RuntimeSpirv-
// OpCooperativeMatrixLoadKHR-08986; with two lone u32 here the NVIDIA driver placed the
// tiles off 16-byte boundaries and every fragment access read shifted data).
var<workgroup> kr: array<atomic<u32>, 4>;
// The same range as plain values, for a uniform load.
var<workgroup> krange: vec4<u32>;

// The cache slots of keys kb..kb+BC into the half of `slots` at `half` (threads t < BC, one
// key each).
fn find_slots(t: u32, pt0: u32, kb: u32, khi: u32, half: u32) {
    if t < BC {
        let j = kb + t;
        var slot = NO_SLOT;
        if j < khi {
            slot = key_slot(pt0, j);
        }
        slots[half + t] = slot;
    }
}

// The words holding eight dims of one key of kv head `kvh` (zeros for a key past the end),
// read from the cache as its element type stores them.
fn fetch8(cache_is_v: bool, half: u32, key: u32, d8: u32, kvh: u32) -> vec4<u32> {
    let slot = slots[half + key];
{{FETCH8}}
}

// Those eight dims, as f16, into row `key` of the tile at `off`.
fn put8(off: u32, key: u32, d8: u32, w: vec4<u32>) {
    let o = off + key * KS + 8u * d8;
{{PUT8}}
}

// Units (one key's eight dims) of a K or V tile per thread, and the words a thread holds for
// both: a tile's words are read while the previous tile is multiplied and only staged after,
// so that their loads are in flight during that work rather than waited for at the copy.
const NU: u32 = (BC * D8 + WG - 1u) / WG;
const NU2: u32 = 2u * NU;

// This thread's K and V words of the tile whose slots are in the half of `slots` at `half`.
fn fetch_tile(t: u32, kvh: u32, half: u32) -> array<vec4<u32>, NU2> {
    var a: array<vec4<u32>, NU2>;
    for (var j = 0u; j < NU; j++) {
        let i = t + j * WG;
        if i < BC * D8 {
            a[2u * j] = fetch8(false, half, i / D8, i % D8, kvh);
            a[2u * j + 1u] = fetch8(true, half, i / D8, i % D8, kvh);
        }
    }
    return a;
}

// Stage words from `fetch_tile` as the K and V tiles.
fn store_tile(t: u32, a: array<vec4<u32>, NU2>) {
    for (var j = 0u; j < NU; j++) {
        let i = t + j * WG;
        if i < BC * D8 {
            put8(0u, i / D8, i % D8, a[2u * j]);
            put8(VOFF, i / D8, i % D8, a[2u * j + 1u]);
        }
    }
}

// Scaled (and soft-capped) score of element c of row r in the subgroup's tile at sb.
fn score(sb: u32, r: u32, c: u32) -> f32 {
    var s = ss[sb + (c / F) * F * F + (c % F) * F + r] * pc.scale;
    if pc.softcap != 0.0 {
        s = tanh_exp(s / pc.softcap) * pc.softcap;
    }
    return s;
}

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32, @builtin(subgroup_id) sgid: u32, @builtin(subgroup_invocation_id) sgi: u32) {
    let lin = wg_linear(wid, nwg);
    let h = lin % pc.n_head;
    // The last blocks of a causal chunk see the most keys: they are dispatched first, so the
    // short blocks fill in behind them instead of the long ones running alone at the end.
    let n_blocks = (pc.n_tokens + BR - 1u) / BR;
    let tok0 = (n_blocks - 1u - lin / pc.n_head) * BR;
    let tok0c = min(tok0, pc.n_tokens - 1u);
    let kvh = h / pc.group;
    let pt0 = S[pc.pt_off + tok0c];
    // Only blocks whose first two rows share a sequence (a prefill chunk) are taken here: in a
    // step of decode rows, one per sequence, the block's first row alone would cost a whole
    // pass over its keys, which the scalar kernel does as cheaply for every row. Other blocks
    // (and padding workgroups) leave at once, the whole workgroup together (the flag goes
    // through workgroup memory, so the cooperative operations below stay in uniform control
    // flow).
    let chunk = tok0c + 1u < pc.n_tokens && S[pc.pt_off + tok0c + 1u] == pt0;
    if t == 0u {
        atomicStore(&kr[0], 0xffffffffu);
        atomicStore(&kr[1], 0u);
        krange = vec4<u32>(0u, 0u, u32(chunk), 0u);
    }
    if workgroupUniformLoad(&krange).z == 0u {
        return;
    }
    // The step's first and last positions (a bidirectional canvas sees all of its rows).
    let first = S[pc.pos_off];
    let last = S[pc.pos_off + pc.n_tokens - 1u];
    // Each of the first BR threads folds its token's key range into the block's.
    if t < BR {
        let tk = tok0 + t;
        if tk < pc.n_tokens && S[pc.pt_off + tk] == pt0 {
            let keys = attn_keys(S[pc.pos_off + tk], first, last, pc.window);
            atomicMin(&kr[0], keys.x);
            atomicMax(&kr[1], keys.y);
        }
    }
    // This lane's query row in its subgroup, and which of the row's keys it scores.
    let r = sgi / LPR;
    let part = sgi % LPR;
    let tok = tok0 + F * sgid + r;
    var handled = false;
    // The row's keys [lo, hi).
    var lo = 0u;
    var hi = 0u;
    if tok < pc.n_tokens {
        handled = S[pc.pt_off + tok] == pt0;
        let keys = attn_keys(S[pc.pos_off + tok], first, last, pc.window);
        lo = keys.x;
        hi = keys.y;
    }
    // The block's query rows, rounded to f16 as the cache's keys are; two dims per thread.
    for (var i = t; i < BR * D / 2u; i += WG) {
        let row = i / (D / 2u);
        let d = 2u * (i % (D / 2u));
        let qt = min(tok0 + row, pc.n_tokens - 1u);
        let qb = (qt * pc.n_head + h) * pc.dk + d;
        kv[row * KS + d] = f16(round_f16(Q[qb]));
        kv[row * KS + d + 1u] = f16(round_f16(Q[qb + 1u]));
    }
    workgroupBarrier();
    if t == 0u {
        krange = vec4<u32>(atomicLoad(&kr[0]), atomicLoad(&kr[1]), 0u, 0u);
    }
    let krv = workgroupUniformLoad(&krange);
    let klo = krv.x;
    let khi = krv.y;
    let qrow = F * sgid * KS;
{{Q_LOAD}}
    var zero: coop_mat{{F}}x{{F}}<f32, C>;
{{O_DECL}}
    let sb = sgid * F * BC;
    find_slots(t, pt0, klo, khi, 0u);
    workgroupBarrier();

    // This lane's row offset and its share of the row sum (over its columns of each tile).
    var off = -1e30;
    var l = 0.0;
    // A sink enters as the row's starting offset with a sum of 1 (in one lane of the row).
    if pc.has_sinks != 0u {
        off = SINKS[h];
        if part == 0u {
            l = 1.0;
        }
    }
    var words = fetch_tile(t, kvh, 0u);
    var half = 0u;
    for (var kb = klo; kb < khi; kb += BC) {
        // The previous tile's readers of kv and ps are done.
        workgroupBarrier();
        store_tile(t, words);
        half = BC - half;
        find_slots(t, pt0, kb + BC, khi, half);
        workgroupBarrier();
        // The next tile's words (zeros past the last) load while this one is multiplied.
        words = fetch_tile(t, kvh, half);
{{S_TILE}}
        workgroupBarrier();
        // The row's largest score in this tile (every lane of the row agrees on it).
        var mt = -1e30;
        for (var c = part * (BC / LPR); c < (part + 1u) * (BC / LPR); c++) {
            let j = kb + c;
            if handled && j >= lo && j < hi {
                mt = max(mt, score(sb, r, c));
            }
        }
        for (var x = 1u; x < LPR; x <<= 1u) {
            mt = max(mt, subgroupShuffleXor(mt, x));
        }
        var alpha = 1.0;
        if mt > off + RESCALE_AT {
            alpha = exp(off - mt);
            off = mt;
        }
        // Outputs (and sums) so far are rescaled only where there are any.
        let rescale = alpha != 1.0 && l > 0.0;
        l *= alpha;
        for (var c = part * (BC / LPR); c < (part + 1u) * (BC / LPR); c++) {
            let j = kb + c;
            var p = 0.0;
            if handled && j >= lo && j < hi {
                p = exp(score(sb, r, c) - off);
            }
            l += p;
            ps[sb + r * BC + c] = f16(p);
        }
        let any_rescale = subgroupAny(rescale);
        if part == 0u {
            row_scale[sgid * F + r] = alpha;
        }
        if sgi == 0u {
            rescale_flags[sgid] = u32(any_rescale);
        }
        // Also the barrier that makes the probabilities visible.
        let flags = workgroupUniformLoad(&rescale_flags);
        if any(flags != vec4<u32>(0u)) {
{{O_RESCALE}}
        }
        let p0 = coopLoadT<coop_mat{{F}}x{{F}}<f16, A>>(&ps[sb], BC);
        let pb1 = sb + F;
        let p1 = coopLoadT<coop_mat{{F}}x{{F}}<f16, A>>(&ps[pb1], BC);
{{PV}}
    }
    for (var x = 1u; x < LPR; x <<= 1u) {
        l += subgroupShuffleXor(l, x);
    }
    if part == 0u {
        var inv_l = 0.0;
        if l > 0.0 {
            inv_l = 1.0 / l;
        }
        row_scale[sgid * F + r] = inv_l;
    }

    // Outputs through `ss` (column-major fragments), masked per row.
{{O_STORE}}
}

// Multiply the rows of the F×F fragment staged column-major at ss[fb..] by their factors in
// `row_scale` (this subgroup's rows from sr).
fn scale_rows(fb: u32, sgi: u32, sr: u32) {
    for (var e = sgi; e < F * F; e += SGS) {
        ss[fb + e] *= row_scale[sr + e % F];
    }
}

// Write one F×F output fragment staged column-major at ss[sb..] (columns d0..d0+F-1), its
// rows multiplied by their factors in `row_scale` (this subgroup's rows from sr); only the
// rows of the block's sequence.
fn store_rows(sb: u32, sgi: u32, sr: u32, tok_base: u32, h: u32, pt0: u32, d0: u32) {
    for (var e = sgi; e < F * F; e += SGS) {
        let tk = tok_base + e % F;
        if tk < pc.n_tokens && S[pc.pt_off + tk] == pt0 {
            O[(tk * pc.n_head + h) * pc.dv + d0 + e / F] = ss[sb + e] * row_scale[sr + e % F];
        }
    }
}
