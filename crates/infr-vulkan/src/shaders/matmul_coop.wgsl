// Cooperative-matrix matmul for prefill: Y[n, m] = X[n, k] · W[m, k]ᵀ (+ bias) with F×F×F
// f16 multiply-accumulate into f32 (F = 16, or 8 on devices that offer only that shape). A
// workgroup computes a BM (weight rows) × BN (activation rows) tile with GM × GN subgroups
// (WG = GM·GN × the device's fixed subgroup size, templated from its capabilities); each
// subgroup owns FM × FN F×F accumulators (BM = F·GM·FM, BN = F·GN·FN). Each k-step of BK
// stages a BM×BK slice of W and the matching BN×BK slice of X in workgroup memory as f16;
// the slices of the next STAGES steps are read from memory into registers while the current
// ones are multiplied (the kernel waits on memory latency, not on the multiplications:
// removing the reads took 8B pp512's matmul time from 291 to 185 ms in one profile). The
// loader part supplies the bindings and `fetch_w` / `fetch_x` (a unit of 16 consecutive k of
// one row each, as read) with `open_w` / `open_x` (the unit in f16 for staging):
// `coop_load_quant.wgsl` dequantizes W on the fly and `coop_x_f32.wgsl` converts f32 X,
// `coop_load_f16.wgsl` reads operands already in f16 (a weight slice dequantized by
// `dequant_f16.wgsl`, activations rounded by `round_act16`), `coop_load_moe.wgsl` reads the
// routed pairs of one expert (mixture-of-experts). The output part (`coop_dense.wgsl` or the
// MoE loader) supplies the parameters, `TILE_GUARD` (code that may end a workgroup with no
// work, uniformly), `DIRECT` and `store_edge`. Interior tiles without a bias store their
// accumulators straight to Y where DIRECT allows; other tiles go through workgroup memory so
// rows and columns past the edge are masked (or scattered) per element.

enable f16;
enable wgpu_cooperative_matrix;

const F: u32 = {{F}}u;
const WG: u32 = {{WG}}u;
const SGS: u32 = {{SGS}}u;
const BM: u32 = {{BM}}u;
const BN: u32 = {{BN}}u;
const BK: u32 = {{BK}}u;
const GM: u32 = {{GM}}u;
const GN: u32 = {{GN}}u;
// Row stride of the staged slices in f16: BK plus 8 so that the rows a fragment load reads
// fall in different banks. SK8 is the stride in staging elements (mat2x4<f16>, 8 f16), SK4
// the stride of the fragment loads (which read through a pointer to the elements' vec4
// columns, and count their stride in vec4).
const SK: u32 = {{SK}}u;
const SK8: u32 = SK / 8u;
const SK4: u32 = SK / 4u;
// This workgroup's share of the inner dimension, k_lo .. k_end (split-K products give each
// workgroup one range and write partial sums from element yoff of Y on, which a reduction
// adds up; other products take all of k and yoff 0). Loaders return zeros at and past k_end.
var<private> k_lo: u32;
var<private> k_end: u32;
var<private> yoff: u32;
// Weight-row tiles per band of the workgroup order (0: weight-row tiles fastest).
const RASTER: u32 = {{RASTER}}u;
// Steps read ahead into registers (0: each slice is read at the start of its own step), and
// the k advanced per iteration of the main loop (one step per register set).
const STAGES: u32 = {{STAGES}}u;
const STEP: u32 = BK * max(STAGES, 1u);
// Loader units (one row × 16 consecutive k) per row of a slice, and per thread for the W
// and X slices.
const KU: u32 = BK / 16u;
const UA: u32 = (KU * BM + WG - 1u) / WG;
const UB: u32 = (KU * BN + WG - 1u) / WG;

// The staged slices, eight f16 per element so that a loader unit is staged with two 16-byte
// stores (with 2-byte stores: 8B pp512 7,318 t/s on an H200; 16-byte: 7,545).
var<workgroup> ws: array<mat2x4<f16>, {{BM}} * {{SK}} / 8>;
var<workgroup> xs: array<mat2x4<f16>, {{BN}} * {{SK}} / 8>;
// One F×F f32 fragment per subgroup, column-major, for edge tiles.
var<workgroup> cs: array<f32, {{CS}}>;

fn put_w(u: u32, v: array<vec4<f16>, 4>) {
    let o = (u / KU) * SK8 + 2u * (u % KU);
    ws[o] = mat2x4<f16>(v[0], v[1]);
    ws[o + 1u] = mat2x4<f16>(v[2], v[3]);
}

fn put_x(u: u32, v: array<vec4<f16>, 4>) {
    let o = (u / KU) * SK8 + 2u * (u % KU);
    xs[o] = mat2x4<f16>(v[0], v[1]);
    xs[o + 1u] = mat2x4<f16>(v[2], v[3]);
}

// This thread's loader units of the W slice at k0 (weight rows from r0), as read.
fn fetch_ws(t: u32, r0: u32, k0: u32) -> array<WUnit, UA> {
    var a: array<WUnit, UA>;
    for (var i = 0u; i < UA; i++) {
        let u = t + i * WG;
        if u < KU * BM {
            a[i] = fetch_w(u, r0, k0);
        }
    }
    return a;
}

// This thread's loader units of the X slice at k0 (activation rows from c0), as read.
fn fetch_xs(t: u32, c0: u32, k0: u32) -> array<XUnit, UB> {
    var b: array<XUnit, UB>;
    for (var i = 0u; i < UB; i++) {
        let u = t + i * WG;
        if u < KU * BN {
            b[i] = fetch_x(u, c0, k0);
        }
    }
    return b;
}

// Stage this thread's loader units in workgroup memory.
fn stage_slices(t: u32, a: array<WUnit, UA>, b: array<XUnit, UB>) {
    for (var i = 0u; i < UA; i++) {
        let u = t + i * WG;
        if u < KU * BM {
            put_w(u, open_w(a[i]));
        }
    }
    for (var i = 0u; i < UB; i++) {
        let u = t + i * WG;
        if u < KU * BN {
            put_x(u, open_x(b[i]));
        }
    }
}

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32, @builtin(subgroup_id) sgid: u32, @builtin(subgroup_invocation_id) sgi: u32) {
    let lin_all = wg_linear(wid, nwg);
{{K_RANGE}}
    var tm = lin % pc.tiles_m;
    var tn = lin / pc.tiles_m;
    if RASTER > 0u {
        // Bands of RASTER weight-row tiles, activation tiles next within a band: the
        // workgroups in flight share their W tiles (read once from memory) and the X tiles
        // of a band (held in L2), as a grouped raster order does.
        let tiles_n = (pc.n + BN - 1u) / BN;
        let band = RASTER * tiles_n;
        if lin < pc.tiles_m * tiles_n {
            let first = (lin / band) * RASTER;
            let rows = min(pc.tiles_m - first, RASTER);
            tm = first + (lin % band) % rows;
            tn = (lin % band) / rows;
        } else {
            // Padding workgroups of a two-dimensional grid: past the activation rows.
            tm = 0u;
            tn = tiles_n;
        }
    }
{{TILE_GUARD}}
    let r0 = tm * BM;
    let c0 = tn * BN;
    // Subgroup (sm, sn) of the GM×GN grid owns weight rows wr.. and activation rows wc...
    let wr = (sgid % GM) * (BM / GM);
    let wc = (sgid / GM) * (BN / GN);
    // No early return for padding workgroups (c0 >= n): cooperative operations need uniform
    // control flow; their loads are clamped and their stores masked below.
{{ACC_DECL}}
    // Register sets of the steps in flight: set 0 for the first step of an iteration, set 1
    // for the second (STAGES = 2).
    var ra0: array<WUnit, UA>;
    var rb0: array<XUnit, UB>;
    var ra1: array<WUnit, UA>;
    var rb1: array<XUnit, UB>;
    if STAGES > 0u {
        ra0 = fetch_ws(t, r0, k_lo);
        rb0 = fetch_xs(t, c0, k_lo);
    }
    if STAGES > 1u {
        ra1 = fetch_ws(t, r0, k_lo + BK);
        rb1 = fetch_xs(t, c0, k_lo + BK);
    }
    for (var k0 = 0u; k0 < {{K_SPAN}}; k0 += STEP) {
        if STAGES == 0u {
            ra0 = fetch_ws(t, r0, k_lo + k0);
            rb0 = fetch_xs(t, c0, k_lo + k0);
        }
        stage_slices(t, ra0, rb0);
        workgroupBarrier();
        if STAGES > 0u && k0 + STEP < {{K_SPAN}} {
            ra0 = fetch_ws(t, r0, k_lo + k0 + STEP);
            rb0 = fetch_xs(t, c0, k_lo + k0 + STEP);
        }
        for (var kk = 0u; kk < BK; kk += F) {
{{MMA}}
        }
        workgroupBarrier();
        // The second step of an iteration past k (an odd number of steps) multiplies zeros:
        // the loaders return zeros past k, and a condition on k0 here would not be uniform
        // control flow to naga (it does not track a loop variable's uniformity).
        if STAGES > 1u {
            stage_slices(t, ra1, rb1);
            workgroupBarrier();
            // Unconditionally: past k the loaders return the zeros the next iteration needs.
            ra1 = fetch_ws(t, r0, k_lo + k0 + BK + STEP);
            rb1 = fetch_xs(t, c0, k_lo + k0 + BK + STEP);
            for (var kk = 0u; kk < BK; kk += F) {
{{MMA}}
            }
            workgroupBarrier();
        }
    }
    // Direct stores need 16-byte aligned columns. Padding workgroups of a split product
    // (k_lo past k) store nothing.
    let interior = DIRECT && k_lo < pc.k && r0 + BM <= pc.m && c0 + BN <= pc.n && pc.has_bias == 0u && (pc.out_stride | pc.out_col0) % 4u == 0u;
    if interior {
        let ys = pc.out_stride;
        let yb = yoff + (c0 + wc) * ys + pc.out_col0 + r0 + wr;
{{STORE_DIRECT}}
    } else {
        let eo = sgid * F * F;
{{STORE_EDGE}}
    }
}
