enable f16;

// Dequantize rows of one weight chunk to f16 for the cooperative matmul over f16 operands
// (`matmul_coop.wgsl` with `coop_load_f16.wgsl`): W16[r, e] = W[row0 + r, e] for r < rows,
// row-major with row stride k. Each thread writes EPT consecutive elements of a row, 16
// bytes at a time: 32 for Q4_K / Q6_K (two `deq16` calls, one scale decode each), 8 for the
// other types (two `deq4` quads, see dequant.wgsl). Dequantizing once per prefill chunk
// replaces the per-tile dequantization that dominated the cooperative matmul (on an H200,
// 8B pp512: 0.88 ms of a 12288x4096x512 product, 0.40 ms without the dequantization
// arithmetic). Values are converted to f16 by the hardware conversion, as the staging
// kernels do. STRIPED (Q4_K / Q6_K): thread t of workgroup w writes 16-byte words
// (w * 4 + s) * WG + t for s < 4, 8 elements each, so that each store of a workgroup covers
// consecutive words (the plain form's stores are 64 bytes apart across threads); the grid is
// the plain form's (32 elements a thread).

struct Params {
    k: u32,
    rows: u32,
    row0: u32,
    soff: u32,
}

var<immediate> pc: Params;

@group(0) @binding(0) var<storage, read> W: array<u32>;
@group(0) @binding(1) var<storage, read_write> W16: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read> TBL: array<u32>;

const EPT: u32 = {{EPT}}u;
const STRIPED: bool = {{STRIPED}};

fn quad(row: u32, e: u32) -> vec4<f32> {
    let blk = row * (pc.k / BLOCK) + e / BLOCK;
    return {{DEQ}}(blk * QW, pc.soff * 4u + blk * SB, (e % BLOCK) / 4u);
}

// Four f16 in two words.
fn pack4(v: vec4<f16>) -> vec2<u32> {
    let f = vec4<f32>(v);
    return vec2<u32>(pack2x16float(f.xy), pack2x16float(f.zw));
}

// Elements e..e+EPT-1 of row `row` of the chunk, as EPT/8 16-byte words.
fn convert(row: u32, e: u32, o: u32) {
{{CONVERT}}
}

// 16-byte word g of the output (elements 8g..8g+7, row-major over the chunk's rows).
fn stripe(g: u32) {
{{STRIPE}}
}

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    if STRIPED {
        let words = pc.rows * (pc.k / 8u);
        let g0 = wg_linear(wid, nwg) * (4u * {{WG}}u) + t;
        for (var s = 0u; s < 4u; s++) {
            let g = g0 + s * {{WG}}u;
            if g < words {
                stripe(g);
            }
        }
        return;
    }
    let i = wg_linear(wid, nwg) * {{WG}}u + t;
    let per_row = pc.k / EPT;
    if i >= pc.rows * per_row {
        return;
    }
    let r = i / per_row;
    let e = EPT * (i % per_row);
    convert(pc.row0 + r, e, (r * pc.k + e) / 8u);
}
