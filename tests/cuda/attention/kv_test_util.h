// Host-side KV-entry encoding for the attention tests: builds ring / paged pools in the GPU formats of
// cuda/attention/kv_cache.cuh from fp32 vectors and returns what each entry dequantizes to.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "attn_test_util.h"
#include "cuda/attention/kv_cache.cuh"

namespace flashseek::cuda::test {

inline float pow2_ceil_host(float v) {
    int e;
    const float m = std::frexp(v, &e);
    return m == 0.5f ? std::ldexp(1.f, e - 1) : std::ldexp(1.f, e);
}

// Encodes v[dim] (bf16-rounded values) into dst; writes the dequantized values to decoded.
inline void encode_kv_entry(const float* v, int dim, int rope, KvFormat fmt, uint8_t* dst, float* decoded) {
    const int nope = dim - rope;
    if (fmt == KvFormat::BF16) {
        for (int d = 0; d < dim; ++d) {
            const uint16_t b = f32_to_bf16(v[d]);
            std::memcpy(dst + 2 * d, &b, 2);
            decoded[d] = bf16_to_f32(b);
        }
        return;
    }
    std::memset(dst, 0, size_t(kv_entry_bytes(fmt, dim, rope)));
    for (int b = 0; b < nope / 64; ++b) {
        float amax = 1e-4f;
        for (int i = 0; i < 64; ++i) amax = std::max(amax, std::fabs(v[b * 64 + i]));
        const float s = pow2_ceil_host(amax / 448.f);
        int e;
        std::frexp(s, &e);
        dst[nope + 2 * rope + b] = uint8_t(e - 1 + 127);
        for (int i = 0; i < 64; ++i) {
            const uint8_t q = f32_to_e4m3(std::clamp(v[b * 64 + i] / s, -448.f, 448.f));
            dst[b * 64 + i] = q;
            decoded[b * 64 + i] = e4m3_to_f32(q) * s;
        }
    }
    for (int d = nope; d < dim; ++d) {
        const uint16_t b = f32_to_bf16(v[d]);
        std::memcpy(dst + nope + 2 * (d - nope), &b, 2);
        decoded[d] = bf16_to_f32(b);
    }
}

// Decodes one entry from its bytes.
inline std::vector<float> decode_kv_entry(const uint8_t* src, int dim, int rope, KvFormat fmt) {
    std::vector<float> out(dim);
    const int nope = dim - rope;
    for (int d = 0; d < dim; ++d) {
        if (fmt == KvFormat::BF16 || d >= nope) {
            uint16_t b;
            std::memcpy(&b, fmt == KvFormat::BF16 ? src + 2 * d : src + nope + 2 * (d - nope), 2);
            out[d] = bf16_to_f32(b);
        } else {
            out[d] = e4m3_to_f32(src[d]) * e8m0_to_f32(src[nope + 2 * rope + d / 64]);
        }
    }
    return out;
}

// A paged pool on the host mirrored to the device: n_slots sequences, each with its own shuffled blocks.
struct PagedPool {
    int n_slots = 0, entries_per_block = 0, max_blocks = 0;
    int64_t block_bytes = 0, offset = 0;
    int entry_bytes = 0;
    std::vector<uint8_t> bytes;
    std::vector<int32_t> tables;
    PagedPool(int slots, int max_entries, int epb, int entry_b, Rng& rng)
        : n_slots(slots), entries_per_block(epb), entry_bytes(entry_b) {
        max_blocks = (max_entries + epb - 1) / epb + 1;
        offset = 64;  // other layers' data precede this layer's entries in a block
        block_bytes = (offset + int64_t(epb) * entry_b + 64 + 15) / 16 * 16;
        const int n_blocks = slots * max_blocks;
        bytes.assign(size_t(n_blocks) * block_bytes, 0xA5);
        tables.resize(size_t(n_blocks));
        std::iota(tables.begin(), tables.end(), 0);
        std::shuffle(tables.begin(), tables.end(), rng.gen);
    }
    uint8_t* entry(int slot, int e) {
        const int32_t block = tables[size_t(slot) * max_blocks + e / entries_per_block];
        return bytes.data() + block * block_bytes + offset + int64_t(e % entries_per_block) * entry_bytes;
    }
    PagedEntries view(uint8_t* dev_base, const int32_t* dev_tables, int32_t format) const {
        PagedEntries p;
        p.base = dev_base;
        p.block_bytes = block_bytes;
        p.offset = offset;
        p.entries_per_block = entries_per_block;
        p.entry_bytes = entry_bytes;
        p.block_tables = dev_tables;
        p.table_stride = max_blocks;
        p.format = format;
        return p;
    }
};

// Device arrays of a TokenBatch built from per-sequence (slot, start, n_tokens).
struct BatchHost {
    std::vector<int32_t> slot, first_row, n_tok, start, token_seq, token_pos;
    void add(int s, int start_pos, int n) {
        first_row.push_back(int32_t(token_seq.size()));
        slot.push_back(s);
        n_tok.push_back(n);
        start.push_back(start_pos);
        for (int i = 0; i < n; ++i) {
            token_seq.push_back(int32_t(slot.size() - 1));
            token_pos.push_back(start_pos + i);
        }
    }
};
struct BatchDev {
    Dev<int32_t> slot, first_row, n_tok, start, token_seq, token_pos;
    TokenBatch batch;
    explicit BatchDev(const BatchHost& h)
        : slot(h.slot), first_row(h.first_row), n_tok(h.n_tok), start(h.start), token_seq(h.token_seq),
          token_pos(h.token_pos) {
        batch.n_seqs = int(h.slot.size());
        batch.n_tokens = int(h.token_seq.size());
        batch.max_seq_tokens = *std::max_element(h.n_tok.begin(), h.n_tok.end());
        batch.seq_slot = slot.ptr;
        batch.seq_first_row = first_row.ptr;
        batch.seq_n_tokens = n_tok.ptr;
        batch.seq_start_pos = start.ptr;
        batch.token_seq = token_seq.ptr;
        batch.token_pos = token_pos.ptr;
    }
};

}  // namespace flashseek::cuda::test
