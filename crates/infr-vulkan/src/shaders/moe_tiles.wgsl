// Work list of the tiled expert matmul (matmul_moe_tiled.wgsl): the routed (token, slot) pairs
// grouped by expert, and tiles of up to C pairs of one expert, so that a workgroup reads an
// expert's weight rows once for C pairs instead of once per pair (`ggml_mul_mat_id` sorts rows
// by expert the same way). TILES[0] = number of tiles; TILES[1 + i] = the i-th pair in expert
// order; TILES[1 + n_pairs + 3 t ..] = (expert, first index into that order, pair count) of
// tile t. One workgroup; the order of pairs inside an expert is arbitrary (each pair's row is
// computed alone, so it does not change any result).

struct Params {
    n_pairs: u32,
    n_expert: u32,
    c: u32,
}

var<immediate> pc: Params;

@group(0) @binding(0) var<storage, read> ROUTE: array<u32>;
@group(0) @binding(1) var<storage, read_write> TILES: array<u32>;

const WG: u32 = 256u;
const MAXE: u32 = {{MAXE}}u;

var<workgroup> cnt: array<atomic<u32>, MAXE>;
var<workgroup> off: array<u32, MAXE>;
var<workgroup> toff: array<u32, MAXE>;

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) li: u32) {
    for (var e = li; e < pc.n_expert; e += WG) {
        atomicStore(&cnt[e], 0u);
    }
    workgroupBarrier();
    for (var p = li; p < pc.n_pairs; p += WG) {
        atomicAdd(&cnt[ROUTE[p]], 1u);
    }
    workgroupBarrier();
    if li == 0u {
        var run = 0u;
        var tiles = 0u;
        for (var e = 0u; e < pc.n_expert; e++) {
            let c = atomicLoad(&cnt[e]);
            off[e] = run;
            toff[e] = tiles;
            run += c;
            tiles += (c + pc.c - 1u) / pc.c;
        }
        TILES[0] = tiles;
    }
    workgroupBarrier();
    let tbase = 1u + pc.n_pairs;
    for (var e = li; e < pc.n_expert; e += WG) {
        let c = atomicLoad(&cnt[e]);
        let nt = (c + pc.c - 1u) / pc.c;
        for (var j = 0u; j < nt; j++) {
            let t = tbase + 3u * (toff[e] + j);
            TILES[t] = e;
            TILES[t + 1u] = off[e] + j * pc.c;
            TILES[t + 2u] = min(pc.c, c - j * pc.c);
        }
        // From here on the count is this expert's next free place in the order.
        atomicStore(&cnt[e], off[e]);
    }
    workgroupBarrier();
    for (var p = li; p < pc.n_pairs; p += WG) {
        let slot = atomicAdd(&cnt[ROUTE[p]], 1u);
        TILES[1u + slot] = p;
    }
}
