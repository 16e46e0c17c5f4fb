// The expert cache of one MoE layer: device slots holding copies of some of the layer's
// experts (which stay whole in host memory), replaced least recently used first. For one
// step's routed (token, slot) pairs: experts already in a slot are stamped with this step;
// each missing expert takes the least recently used slot that this step does not need (the
// lowering guarantees enough: at most `slots` pairs), and its copy is listed in JOBS for
// `moe_fetch.wgsl`; then every pair's expert id becomes its slot, so that the expert matmuls
// read the slot buffers. One workgroup.
//   TABLE: [0] the last step's stamp, [1] hits, [2] misses, [3] unused, then slot -> expert
//          (`slots` words, NONE when empty), slot -> stamp of its last use (`slots`),
//          expert -> slot (`n_expert`, NONE when not cached).
//   JOBS:  [0] copies, then (expert, slot) per copy.

struct Params {
    n_pairs: u32,
    n_expert: u32,
    slots: u32,
    pad: u32,
}

var<immediate> pc: Params;

@group(0) @binding(0) var<storage, read_write> ROUTE: array<u32>;
@group(0) @binding(1) var<storage, read_write> TABLE: array<u32>;
@group(0) @binding(2) var<storage, read_write> JOBS: array<u32>;

const WG: u32 = 256u;
const MAXE: u32 = {{MAXE}}u;
const NONE: u32 = 0xffffffffu;

// The table's state in workgroup memory while the step's slots are decided; written back at
// the end (every word by one invocation), so no invocation reads another's storage writes.
var<workgroup> slot_expert: array<u32, MAXE>;
var<workgroup> slot_stamp: array<u32, MAXE>;
var<workgroup> expert_slot: array<u32, MAXE>;
var<workgroup> need: array<atomic<u32>, MAXE>;
var<workgroup> missing: array<u32, MAXE>;
// The copy (index into `missing`) each slot takes this step, or NONE.
var<workgroup> take: array<u32, MAXE>;
var<workgroup> n_miss: atomic<u32>;
var<workgroup> n_hit: atomic<u32>;

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) li: u32) {
    let s_expert = 4u;
    let s_stamp = 4u + pc.slots;
    let e_slot = 4u + 2u * pc.slots;
    for (var s = li; s < pc.slots; s += WG) {
        slot_expert[s] = TABLE[s_expert + s];
        slot_stamp[s] = TABLE[s_stamp + s];
    }
    for (var e = li; e < pc.n_expert; e += WG) {
        expert_slot[e] = TABLE[e_slot + e];
        atomicStore(&need[e], 0u);
    }
    if li == 0u {
        atomicStore(&n_miss, 0u);
        atomicStore(&n_hit, 0u);
    }
    workgroupBarrier();
    for (var p = li; p < pc.n_pairs; p += WG) {
        atomicStore(&need[ROUTE[p]], 1u);
    }
    workgroupBarrier();
    let stamp = TABLE[0] + 1u;
    for (var e = li; e < pc.n_expert; e += WG) {
        if atomicLoad(&need[e]) != 0u {
            let s = expert_slot[e];
            if s != NONE {
                slot_stamp[s] = stamp;
                atomicAdd(&n_hit, 1u);
            } else {
                missing[atomicAdd(&n_miss, 1u)] = e;
            }
        }
    }
    workgroupBarrier();
    let nm = atomicLoad(&n_miss);
    // Slots this step does not use, ranked oldest first (ties to the lower slot).
    for (var s = li; s < pc.slots; s += WG) {
        let u = slot_stamp[s];
        var r = NONE;
        if u != stamp {
            r = 0u;
            for (var t = 0u; t < pc.slots; t++) {
                let v = slot_stamp[t];
                if v != stamp && (v < u || (v == u && t < s)) {
                    r++;
                }
            }
        }
        take[s] = select(NONE, r, r < nm);
    }
    workgroupBarrier();
    for (var s = li; s < pc.slots; s += WG) {
        let r = take[s];
        if r != NONE {
            let e = missing[r];
            let old = slot_expert[s];
            if old != NONE {
                expert_slot[old] = NONE;
            }
            slot_expert[s] = e;
            slot_stamp[s] = stamp;
            expert_slot[e] = s;
            JOBS[1u + 2u * r] = e;
            JOBS[2u + 2u * r] = s;
        }
    }
    workgroupBarrier();
    for (var p = li; p < pc.n_pairs; p += WG) {
        ROUTE[p] = expert_slot[ROUTE[p]];
    }
    for (var s = li; s < pc.slots; s += WG) {
        TABLE[s_expert + s] = slot_expert[s];
        TABLE[s_stamp + s] = slot_stamp[s];
    }
    for (var e = li; e < pc.n_expert; e += WG) {
        TABLE[e_slot + e] = expert_slot[e];
    }
    if li == 0u {
        TABLE[0] = stamp;
        TABLE[1] += atomicLoad(&n_hit);
        TABLE[2] += nm;
        JOBS[0] = nm;
    }
}
