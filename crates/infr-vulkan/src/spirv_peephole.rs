//! A rewrite of naga's SPIR-V that WGSL cannot ask for: four f16 held as two u32 words,
//! unpacked to f32 and converted back to f16 (`vec4<f16>(vec4<f32>(unpack2x16float(a),
//! unpack2x16float(b)))`, the only exact way to reinterpret the words in naga 30, whose
//! `bitcast<vec2<f16>>(u32)` is mistyped), become two `OpBitcast`s to `vec2<f16>`. The
//! value is the same bit for bit (a NaN keeps its payload); the conversions are gone. The
//! f16 loader of the cooperative matmul (`coop_load_f16.wgsl`) unpacks 16 halves per
//! loader unit this way.
//!
//! The rewrite is conservative: it applies only where every id involved has the one use
//! the pattern gives it (ids are counted as any operand word of that value, so a literal of
//! the same number only prevents a rewrite).

use spirv::Op;

/// The instruction number of `UnpackHalf2x16` in the GLSL.std.450 set.
const UNPACK_HALF_2X16: u32 = spirv::GlslStd450Op::UnpackHalf2x16 as u32;

/// One instruction: its first word's index and its word count.
#[derive(Clone, Copy)]
struct Inst {
    at: usize,
    len: usize,
    op: u32,
}

fn instructions(words: &[u32]) -> Option<Vec<Inst>> {
    let mut out = Vec::new();
    let mut at = 5;
    while at < words.len() {
        let len = (words[at] >> 16) as usize;
        if len == 0 || at + len > words.len() {
            return None;
        }
        out.push(Inst { at, len, op: words[at] & 0xffff });
        at += len;
    }
    Some(out)
}

fn word(op: Op, len: usize) -> u32 {
    ((len as u32) << 16) | op as u32
}

/// Rewrite every unpack-to-f32-and-convert-back of two u32 words into `vec4<f16>` as two
/// bitcasts; returns how many were rewritten (the module is unchanged when none are, or when
/// it does not parse as SPIR-V).
pub(crate) fn bitcast_half_round_trips(words: &mut Vec<u32>) -> usize {
    let Some(insts) = instructions(words) else { return 0 };
    let args = |i: &Inst| &words[i.at + 1..i.at + i.len];
    // Definitions, use counts and the types the pattern needs.
    let mut def = std::collections::HashMap::new();
    let mut count = std::collections::HashMap::<u32, u32>::new();
    let (mut glsl, mut half, mut f32_ty, mut v2half) = (None, None, None, None);
    let mut vec_of = std::collections::HashMap::new();
    for (k, i) in insts.iter().enumerate() {
        let a = args(i);
        for &x in a {
            *count.entry(x).or_default() += 1;
        }
        match Op::from_u32(i.op) {
            Some(Op::ExtInstImport) if a.len() >= 2 => {
                let name: Vec<u8> = a[1..].iter().flat_map(|w| w.to_le_bytes()).take_while(|&b| b != 0).collect();
                if name == b"GLSL.std.450" {
                    glsl = Some(a[0]);
                }
            }
            Some(Op::TypeFloat) if a.len() == 2 && a[1] == 16 => half = Some((a[0], k)),
            Some(Op::TypeFloat) if a.len() == 2 && a[1] == 32 => f32_ty = Some(a[0]),
            Some(Op::TypeVector) if a.len() == 3 => {
                vec_of.insert(a[0], (a[1], a[2]));
            }
            _ => {}
        }
        // Result ids of the instructions the pattern reads (type, result, ...).
        if matches!(Op::from_u32(i.op), Some(Op::ExtInst | Op::CompositeConstruct | Op::FConvert)) && a.len() >= 2 {
            def.insert(a[1], k);
        }
    }
    let (Some(glsl), Some((half, half_at)), Some(f32_ty)) = (glsl, half, f32_ty) else { return 0 };
    for (&id, &(c, n)) in &vec_of {
        if c == half && n == 2 {
            v2half = Some(id);
        }
    }
    let is_vec = |id: u32, comp: u32, n: u32| vec_of.get(&id) == Some(&(comp, n));
    // A defined id's occurrences are its definition plus its uses.
    let used_once = |id: u32| count.get(&id) == Some(&2);
    // (unpack a, unpack b, construct, convert) instruction indices, and the words unpacked.
    let mut found = Vec::new();
    for (k, i) in insts.iter().enumerate() {
        let a = args(i);
        if Op::from_u32(i.op) != Some(Op::FConvert) || a.len() != 3 || !is_vec(a[0], half, 4) {
            continue;
        }
        let Some(&ck) = def.get(&a[2]) else { continue };
        let c = args(&insts[ck]);
        let construct_ok = Op::from_u32(insts[ck].op) == Some(Op::CompositeConstruct)
            && c.len() == 4
            && is_vec(c[0], f32_ty, 4)
            && used_once(c[1]);
        if !construct_ok {
            continue;
        }
        let unpack = |id: u32| -> Option<(usize, u32)> {
            let &uk = def.get(&id)?;
            let u = args(&insts[uk]);
            let ok = Op::from_u32(insts[uk].op) == Some(Op::ExtInst)
                && u.len() == 5
                && is_vec(u[0], f32_ty, 2)
                && u[2] == glsl
                && u[3] == UNPACK_HALF_2X16
                && used_once(u[1]);
            ok.then_some((uk, u[4]))
        };
        if let (Some(x), Some(y)) = (unpack(c[2]), unpack(c[3])) {
            found.push((x, y, ck, k));
        }
    }
    if found.is_empty() {
        return 0;
    }
    let v2 = v2half.unwrap_or(words[3]);
    let mut replace: std::collections::HashMap<usize, Vec<u32>> = std::collections::HashMap::new();
    for &((xa, wa), (xb, wb), ck, fk) in &found {
        let (ra, rb) = (args(&insts[xa])[1], args(&insts[xb])[1]);
        let c = args(&insts[ck]);
        let (v4, cid) = (args(&insts[fk])[0], c[1]);
        let fid = args(&insts[fk])[1];
        replace.insert(xa, vec![word(Op::Bitcast, 4), v2, ra, wa]);
        replace.insert(xb, vec![word(Op::Bitcast, 4), v2, rb, wb]);
        replace.insert(ck, vec![word(Op::CompositeConstruct, 5), v4, cid, ra, rb]);
        replace.insert(fk, vec![word(Op::CopyObject, 4), v4, fid, cid]);
    }
    let mut out = words[..5].to_vec();
    for (k, i) in insts.iter().enumerate() {
        match replace.get(&k) {
            Some(r) => out.extend_from_slice(r),
            None => out.extend_from_slice(&words[i.at..i.at + i.len]),
        }
        if k == half_at && v2half.is_none() {
            out.extend_from_slice(&[word(Op::TypeVector, 4), v2, half, 2]);
        }
    }
    if v2half.is_none() {
        out[3] += 1;
    }
    *words = out;
    found.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::compile_wgsl;

    const SRC: &str = "enable f16;
@group(0) @binding(0) var<storage, read> X: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read_write> Y: array<vec4<f16>>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
    let w = X[g.x];
    Y[2u * g.x] = vec4<f16>(vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y)));
    {{SECOND}}
}";

    fn ops(words: &[u32]) -> Vec<u32> {
        instructions(words).unwrap().iter().map(|i| i.op).collect()
    }

    /// The round trip is compiled into bitcasts (`compile_wgsl` applies the rewrite), and a
    /// second, different use of an unpacked value keeps its own round trip.
    #[test]
    fn round_trips_become_bitcasts_where_alone() {
        let second = "Y[2u * g.x + 1u] = vec4<f16>(vec4<f32>(unpack2x16float(w.z), unpack2x16float(w.w)));";
        let words = compile_wgsl("t", &SRC.replace("{{SECOND}}", second), true).unwrap();
        let o = ops(&words);
        assert_eq!(o.iter().filter(|&&x| x == Op::FConvert as u32).count(), 0);
        assert_eq!(o.iter().filter(|&&x| x == Op::Bitcast as u32).count(), 4);
        // An unpacked value also used as f32 elsewhere: left as it was.
        let shared =
            "let u = unpack2x16float(w.z);\n    Y[2u * g.x + 1u] = vec4<f16>(vec4<f32>(u, u)) + vec4<f16>(f16(u.x));";
        let mut words = naga_only(&SRC.replace("{{SECOND}}", shared));
        let before = ops(&words).iter().filter(|&&x| x == Op::FConvert as u32).count();
        assert_eq!(bitcast_half_round_trips(&mut words), 1);
        let after = ops(&words).iter().filter(|&&x| x == Op::FConvert as u32).count();
        assert_eq!(after, before - 1);
    }

    /// Naga's output without the rewrite.
    fn naga_only(src: &str) -> Vec<u32> {
        let module = naga::front::wgsl::parse_str(src).unwrap();
        let caps = naga::valid::Capabilities::SHADER_FLOAT16 | naga::valid::Capabilities::SHADER_FLOAT16_IN_FLOAT32;
        let info = naga::valid::Validator::new(naga::valid::ValidationFlags::all(), caps).validate(&module).unwrap();
        let opts = naga::back::spv::Options { lang_version: (1, 3), ..Default::default() };
        naga::back::spv::write_vec(&module, &info, &opts, None).unwrap()
    }

    /// The cooperative matmul's f16 loader (what the rewrite is for) ends up with bitcasts
    /// and no f16 conversions: a naga update that changes the pattern shows here.
    #[test]
    fn the_f16_matmul_loader_is_rewritten() {
        let tile = crate::kernels::CoopTile { frag: 16, bm: 128, bn: 128, gm: 2, gn: 4, bk: 64 };
        let spec = crate::kernels::matmul_coop(crate::kernels::CoopOperands::F16, 32, tile);
        let words = compile_wgsl(&spec.name, &spec.wgsl().unwrap(), true).unwrap();
        let o = ops(&words);
        assert_eq!(o.iter().filter(|&&x| x == Op::FConvert as u32).count(), 0);
        assert!(o.contains(&(Op::Bitcast as u32)));
    }

    /// Garbage is left alone.
    #[test]
    fn malformed_modules_are_unchanged() {
        let mut w = vec![0x0723_0203, 0x0001_0300, 0, 10, 0, 0xffff_0001];
        let before = w.clone();
        assert_eq!(bitcast_half_round_trips(&mut w), 0);
        assert_eq!(w, before);
    }
}
