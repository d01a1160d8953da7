// Block-pool bookkeeping and device allocation for per-sequence state (see state_pool.h).
#include "cuda/backend/state_pool.h"

#include <algorithm>

#include "util/error.h"

namespace flashseek::cuda {

StatePool::StatePool(const StateGeometry& g, int max_sequences, int64_t max_context, int64_t pool_bytes)
    : g_(g), max_seqs_(max_sequences), max_context_(max_context) {
    FS_CHECK(max_sequences >= 1, "state pool: max_sequences must be >= 1 (got {})", max_sequences);
    FS_CHECK(max_context >= 1, "state pool: max_context must be >= 1 (got {})", max_context);
    for (const auto& l : g.layers)
        FS_CHECK(l.ratio == 0 || g.block_tokens % l.ratio == 0,
                 "state pool: block_tokens {} is not a multiple of compress ratio {}", g.block_tokens, l.ratio);
    const size_t L = g.layers.size();
    const int slots = max_sequences + 1;
    // Fixed part: rings then compressor states, each layer's region [slots][...].
    size_t off = 0;
    ring_layer_off_.resize(L);
    cstate_off_.assign(L, 0);
    istate_off_.assign(L, 0);
    for (size_t l = 0; l < L; ++l) {
        ring_layer_off_[l] = int64_t(off);
        off = align_up(off + size_t(slots) * size_t(ring_slot_stride()), 256);
    }
    for (size_t l = 0; l < L; ++l) {
        cstate_off_[l] = int64_t(off);
        off = align_up(off + size_t(slots) * size_t(g.layers[l].compressor_state_bytes), 256);
        istate_off_[l] = int64_t(off);
        off = align_up(off + size_t(slots) * size_t(g.layers[l].index_compressor_state_bytes), 256);
    }
    fixed_.allocate(std::max<size_t>(off, 256), "per-sequence window rings and compressor state");
    ring_base_ = fixed_.as<uint8_t>();
    CUDA_CHECK(cudaMemset(fixed_.get(), 0, fixed_.bytes()));
    // Paged part: one block = every layer's entries for block_tokens tokens.
    comp_off_.assign(L, 0);
    index_off_.assign(L, 0);
    size_t b = 0;
    for (size_t l = 0; l < L; ++l) {
        const auto& lg = g.layers[l];
        if (lg.ratio == 0) continue;
        const int64_t epb = g.block_tokens / lg.ratio;
        comp_off_[l] = int64_t(b);
        b = align_up(b + size_t(epb * lg.comp_entry_bytes), 256);
        if (lg.index_key_bytes > 0) {
            index_off_[l] = int64_t(b);
            b = align_up(b + size_t(epb * lg.index_key_bytes), 256);
        }
    }
    block_bytes_ = int64_t(std::max<size_t>(b, 256));
    max_blocks_per_seq_ = blocks_for(max_context);
    const int64_t fixed_bytes = int64_t(off);
    int64_t avail = pool_bytes - fixed_bytes;
    total_blocks_ = std::max<int64_t>(avail / block_bytes_, slots);
    blocks_.allocate(size_t(total_blocks_) * size_t(block_bytes_), "compressed KV block pool");
    CUDA_CHECK(cudaMemset(blocks_.get(), 0, blocks_.bytes()));
    tables_host_.assign(size_t(slots) * size_t(max_blocks_per_seq_), 0);
    tables_dev_.allocate(tables_host_.size() * sizeof(int32_t), "block tables");
    owned_.assign(size_t(slots), {});
    length_.assign(size_t(slots), 0);
    live_.assign(size_t(slots), 0);
    free_blocks_.reserve(size_t(total_blocks_));
    for (int64_t i = total_blocks_ - 1; i >= 0; --i) free_blocks_.push_back(int32_t(i));
    // The padding slot keeps one block forever so that its (scratch) entries have somewhere to go.
    owned_[size_t(padding_slot())].push_back(free_blocks_.back());
    free_blocks_.pop_back();
    tables_host_[size_t(padding_slot()) * size_t(max_blocks_per_seq_)] = owned_[size_t(padding_slot())][0];
}

StateMemoryStats StatePool::stats() const {
    StateMemoryStats s;
    s.block_tokens = g_.block_tokens;
    s.total_blocks = total_blocks_ - 1;
    s.used_blocks = total_blocks_ - 1 - int64_t(free_blocks_.size());
    s.bytes_per_block = block_bytes_;
    s.live_sequences = int(std::count(live_.begin(), live_.end() - 1, 1));
    return s;
}

int StatePool::create() {
    for (int i = 0; i < max_seqs_; ++i) {
        if (!live_[size_t(i)]) {
            live_[size_t(i)] = 1;
            length_[size_t(i)] = 0;
            return i;
        }
    }
    fail("cannot create a sequence: all {} sequence slots are live (max_sequences)", max_seqs_);
}

void StatePool::release(int slot) {
    FS_CHECK(live(slot), "free_sequence: sequence {} is not live", slot);
    for (int32_t b : owned_[size_t(slot)]) free_blocks_.push_back(b);
    owned_[size_t(slot)].clear();
    live_[size_t(slot)] = 0;
    length_[size_t(slot)] = 0;
}

void StatePool::reserve_all(const std::vector<std::pair<int, int64_t>>& req) {
    int64_t need = 0;
    for (const auto& [slot, n] : req) {
        FS_CHECK(live(slot), "forward: sequence {} is not live", slot);
        if (n > max_context_)
            throw OutOfStateMemory(fmt::format("sequence {} would reach {} tokens, beyond max_context {}", slot, n,
                                               max_context_));
        need += std::max<int64_t>(0, blocks_for(n) - int64_t(owned_[size_t(slot)].size()));
    }
    if (need > int64_t(free_blocks_.size()))
        throw OutOfStateMemory(fmt::format("state pool exhausted: the step needs {} more blocks of {} tokens, {} free",
                                           need, g_.block_tokens, free_blocks_.size()));
    for (const auto& [slot, n] : req) {
        auto& own = owned_[size_t(slot)];
        while (int64_t(own.size()) < blocks_for(n)) {
            own.push_back(free_blocks_.back());
            free_blocks_.pop_back();
            tables_host_[size_t(slot) * size_t(max_blocks_per_seq_) + own.size() - 1] = own.back();
            tables_dirty_ = true;
        }
    }
}

void StatePool::reset_padding_slot() { length_[size_t(padding_slot())] = 0; }

uint8_t* StatePool::compressor_state(int layer, bool indexer) const {
    return ring_base_ + (indexer ? istate_off_ : cstate_off_)[size_t(layer)];
}
int64_t StatePool::compressor_state_stride(int layer, bool indexer) const {
    const auto& l = g_.layers[size_t(layer)];
    return indexer ? l.index_compressor_state_bytes : l.compressor_state_bytes;
}
int64_t StatePool::entries_per_block(int layer) const {
    const int r = g_.layers[size_t(layer)].ratio;
    return r ? g_.block_tokens / r : 0;
}

void StatePool::upload_tables(cudaStream_t s) {
    if (!tables_dirty_) return;
    CUDA_CHECK(cudaMemcpyAsync(tables_dev_.get(), tables_host_.data(), tables_host_.size() * sizeof(int32_t),
                                cudaMemcpyHostToDevice, s));
    CUDA_CHECK(cudaStreamSynchronize(s));  // the host vector may change right after; tables change rarely
    tables_dirty_ = false;
}

void StatePool::clear_slot_state(int slot, cudaStream_t s) {
    for (size_t l = 0; l < g_.layers.size(); ++l) {
        CUDA_CHECK(cudaMemsetAsync(ring(int(l)) + int64_t(slot) * ring_slot_stride(), 0, size_t(ring_slot_stride()), s));
        for (bool ix : {false, true}) {
            const int64_t st = compressor_state_stride(int(l), ix);
            if (st) CUDA_CHECK(cudaMemsetAsync(compressor_state(int(l), ix) + int64_t(slot) * st, 0, size_t(st), s));
        }
    }
}

}  // namespace flashseek::cuda
