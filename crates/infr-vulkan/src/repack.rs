//! Load-time repacking of ggml blocks into the GPU layout.
//!
//! WGSL has no 8- or 16-bit integers and ggml blocks are not 4-byte aligned (Q4_0 is 18
//! bytes, Q6_K 210), so every weight is split into two planes (structure of arrays):
//!
//! * the **quant plane**: the quant bytes of each block (`qs`, `qh`, `hmask`…), `QW` whole
//!   u32 words per block, contiguous across blocks — adjacent threads read adjacent words;
//! * the **scale plane**: the remaining fields (f16 scales, packed 6-bit scales…), `SB` bytes
//!   per block (`SB` even, so every f16 sits inside one u32 word), starting word aligned.
//!
//! Field order inside each plane is the ggml order, so the shaders use ggml's byte offsets
//! relative to the plane. Plain float types (F32/F16/BF16) use pseudo-blocks of 4 elements
//! with an empty scale plane. Large tensors are cut into row chunks that each fit one
//! storage-buffer binding (`maxStorageBufferRange`).

use infr_quant::GgmlType;

/// How one weight type is laid out on the GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuLayout {
    /// The ggml type.
    pub ty: GgmlType,
    /// Elements per (pseudo-)block.
    pub block_elems: u32,
    /// Bytes of one ggml block (or pseudo-block).
    pub block_bytes: u32,
    /// u32 words of quant data per block.
    pub qw: u32,
    /// Bytes of scale data per block (even).
    pub sb: u32,
    /// Byte ranges of a ggml block that make up the quant plane (the rest is the scale plane).
    quant_ranges: &'static [(u32, u32)],
    /// Name of the WGSL dequantizer (`deq4_<name>`).
    pub deq: &'static str,
}

/// `(start, len)` ranges.
type Ranges = &'static [(u32, u32)];

const fn layout(
    ty: GgmlType,
    block_elems: u32,
    block_bytes: u32,
    quant_ranges: Ranges,
    deq: &'static str,
) -> GpuLayout {
    let mut q = 0;
    let mut i = 0;
    while i < quant_ranges.len() {
        q += quant_ranges[i].1;
        i += 1;
    }
    assert!(q % 4 == 0, "quant plane must be whole words");
    let s = block_bytes - q;
    GpuLayout { ty, block_elems, block_bytes, qw: q / 4, sb: s + (s & 1), quant_ranges, deq }
}

/// The GPU layout of `ty`, or `None` if this backend cannot run it.
pub fn gpu_layout(ty: GgmlType) -> Option<GpuLayout> {
    use GgmlType::*;
    Some(match ty {
        F32 => layout(F32, 4, 16, &[(0, 16)], "f32"),
        F16 => layout(F16, 4, 8, &[(0, 8)], "f16"),
        BF16 => layout(BF16, 4, 8, &[(0, 8)], "bf16"),
        // {d, qs[16]}
        Q4_0 => layout(Q4_0, 32, 18, &[(2, 16)], "q4_0"),
        // {d, m, qs[16]}
        Q4_1 => layout(Q4_1, 32, 20, &[(4, 16)], "q4_1"),
        // {d, qh[4], qs[16]}
        Q5_0 => layout(Q5_0, 32, 22, &[(2, 20)], "q5_0"),
        // {d, m, qh[4], qs[16]}
        Q5_1 => layout(Q5_1, 32, 24, &[(4, 20)], "q5_1"),
        // {d, qs[32]}
        Q8_0 => layout(Q8_0, 32, 34, &[(2, 32)], "q8_0"),
        // {scales[16], qs[64], d, dmin}
        Q2_K => layout(Q2_K, 256, 84, &[(16, 64)], "q2_k"),
        // {hmask[32], qs[64], scales[12], d}
        Q3_K => layout(Q3_K, 256, 110, &[(0, 96)], "q3_k"),
        // {d, dmin, scales[12], qs[128]}
        Q4_K => layout(Q4_K, 256, 144, &[(16, 128)], "q4_k"),
        // {d, dmin, scales[12], qh[32], qs[128]}
        Q5_K => layout(Q5_K, 256, 176, &[(16, 160)], "q5_k"),
        // {ql[128], qh[64], scales[16], d}
        Q6_K => layout(Q6_K, 256, 210, &[(0, 192)], "q6_k"),
        // {d, qs[64] (u16[32])}
        IQ2_XXS => layout(IQ2_XXS, 256, 66, &[(2, 64)], "iq2_xxs"),
        // {d, qs[64], scales[8]}
        IQ2_XS => layout(IQ2_XS, 256, 74, &[(2, 64)], "iq2_xs"),
        // {d, qs[64], qh[8], scales[8]}
        IQ2_S => layout(IQ2_S, 256, 82, &[(2, 72)], "iq2_s"),
        // {d, qs[96]}
        IQ3_XXS => layout(IQ3_XXS, 256, 98, &[(2, 96)], "iq3_xxs"),
        // {d, qs[64], qh[8], signs[32], scales[4]}
        IQ3_S => layout(IQ3_S, 256, 110, &[(2, 104)], "iq3_s"),
        // {d, qs[32], qh[16] (u16[8])}
        IQ1_S => layout(IQ1_S, 256, 50, &[(2, 48)], "iq1_s"),
        // {qs[32], qh[16], scales[8]}
        IQ1_M => layout(IQ1_M, 256, 56, &[(0, 48)], "iq1_m"),
        // {d, qs[16]}
        IQ4_NL => layout(IQ4_NL, 32, 18, &[(2, 16)], "iq4_nl"),
        // {d, scales_h, scales_l[4], qs[128]}
        IQ4_XS => layout(IQ4_XS, 256, 136, &[(8, 128)], "iq4_xs"),
        // {qs[48], qh[4], d}
        TQ1_0 => layout(TQ1_0, 256, 54, &[(0, 52)], "tq1_0"),
        // {qs[64], d}
        TQ2_0 => layout(TQ2_0, 256, 66, &[(0, 64)], "tq2_0"),
        // {e, qs[16]}
        MXFP4 => layout(MXFP4, 32, 17, &[(1, 16)], "mxfp4"),
        // {d[4], qs[32]}
        NVFP4 => layout(NVFP4, 64, 36, &[(4, 32)], "nvfp4"),
        // {d, qs[16]}
        Q1_0 => layout(Q1_0, 128, 18, &[(2, 16)], "q1_0"),
        // {d, qs[16]}
        Q2_0 => layout(Q2_0, 64, 18, &[(2, 16)], "q2_0"),
        Q8_1 | Q8_K | F64 | I8 | I16 | I32 | I64 => return None,
    })
}

/// One repacked row chunk: quant plane then scale plane, as little-endian bytes.
#[derive(Debug, Clone)]
pub struct Repacked {
    /// The bytes to upload.
    pub bytes: Vec<u8>,
    /// Word offset of the scale plane.
    pub scale_word_offset: u32,
}

impl GpuLayout {
    /// Blocks in a row of `cols` elements (`cols` must be a multiple of `block_elems`).
    pub fn blocks_per_row(&self, cols: usize) -> usize {
        cols / self.block_elems as usize
    }

    /// Bytes one row takes on the GPU (both planes).
    pub fn gpu_row_bytes(&self, cols: usize) -> u64 {
        self.blocks_per_row(cols) as u64 * (self.qw as u64 * 4 + self.sb as u64)
    }

    /// Repack whole ggml blocks into the two planes.
    pub fn repack(&self, src: &[u8]) -> Repacked {
        let bb = self.block_bytes as usize;
        let nblocks = src.len() / bb;
        let qbytes = nblocks * self.qw as usize * 4;
        let sbytes = nblocks * self.sb as usize;
        // Padded to 16 bytes: kernels may read the chunk as 16-byte words.
        let mut out = vec![0u8; (qbytes + sbytes.next_multiple_of(4)).next_multiple_of(16)];
        let (qp, sp) = out.split_at_mut(qbytes);
        // The scale ranges are the complement of the quant ranges.
        let mut scale_ranges = Vec::new();
        let mut at = 0u32;
        for &(s, l) in self.quant_ranges {
            if s > at {
                scale_ranges.push((at, s - at));
            }
            at = s + l;
        }
        if at < self.block_bytes {
            scale_ranges.push((at, self.block_bytes - at));
        }
        let (qw, sb) = (self.qw as usize * 4, self.sb as usize);
        for (b, blk) in src.chunks_exact(bb).enumerate() {
            let mut qi = b * qw;
            for &(s, l) in self.quant_ranges {
                let (s, l) = (s as usize, l as usize);
                qp[qi..qi + l].copy_from_slice(&blk[s..s + l]);
                qi += l;
            }
            let mut si = b * sb;
            for &(s, l) in &scale_ranges {
                let (s, l) = (s as usize, l as usize);
                sp[si..si + l].copy_from_slice(&blk[s..s + l]);
                si += l;
            }
        }
        Repacked { bytes: out, scale_word_offset: (qbytes / 4) as u32 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_runnable_type_has_a_layout_matching_ggml_sizes() {
        for ty in GgmlType::ALL {
            if let Some(l) = gpu_layout(ty) {
                let info = ty.info();
                if info.block_size > 1 {
                    assert_eq!(l.block_bytes as usize, info.type_size, "{ty}");
                    assert_eq!(l.block_elems as usize, info.block_size, "{ty}");
                }
                assert!(l.qw * 4 <= l.block_bytes && l.sb % 2 == 0, "{ty}");
            }
        }
    }

    #[test]
    fn planes_split_fields() {
        let l = gpu_layout(GgmlType::Q4_0).unwrap();
        let mut blk = vec![0u8; 36];
        for (i, b) in blk.iter_mut().enumerate() {
            *b = i as u8;
        }
        let r = l.repack(&blk);
        assert_eq!(r.scale_word_offset, 8);
        assert_eq!(&r.bytes[0..16], &blk[2..18]);
        assert_eq!(&r.bytes[16..32], &blk[20..36]);
        assert_eq!(&r.bytes[32..36], &[0, 1, 18, 19]);
    }
}
