// BPE merges by rank: the pair table and the merge loops (short chunks rescanned, long ones with a heap).
// Part of the native tokenizer core (_native.cpp includes it); no Python API here.
#pragma once

#include <cstdint>
#include <cstddef>
#include <cstring>
#include <functional>
#include <queue>
#include <utility>
#include <vector>

namespace lmprep_native {

// ---- BPE merges by rank --------------------------------------------------------------------------

constexpr uint32_t NO_RANK = UINT32_MAX;
constexpr size_t SHORT_CHUNK = 64;  // below: rescan for the lowest rank; above: a heap over a linked list

// pair -> (rank, new ID). Merging a chunk that no cache holds waits on these lookups more than it
// computes, so they touch as little memory as they can: the pairs of two IDs under DENSE (the byte kind's
// base IDs, which every chunk starts from) in one direct table, the others in an open-addressing table
// with linear probing, at most half full, whose 16-byte slot holds the key and its value together.
class MergeTable {
  public:
    static constexpr uint64_t NONE = UINT64_MAX;  // packed(): no rank (NO_RANK in the upper half)

    void build(const std::vector<std::pair<uint32_t, uint32_t>> &pairs, const std::vector<uint32_t> &results) {
        int bits = 4;
        while ((size_t{1} << bits) < 2 * pairs.size() + 2) bits++;
        shift_ = 64 - bits;
        mask_ = (size_t{1} << bits) - 1;
        slots_.assign(mask_ + 1, Slot{EMPTY, NONE});
        dense_.assign(DENSE * DENSE, NONE);
        for (size_t rank = 0; rank < pairs.size(); rank++) {
            const auto [a, b] = pairs[rank];
            // a pair given twice keeps its last rank, as a dict built in rank order does
            const uint64_t value = (static_cast<uint64_t>(rank) << 32) | results[rank];
            if (a < DENSE && b < DENSE) {
                dense_[a * DENSE + b] = value;
                continue;
            }
            const uint64_t key = pack(a, b);
            size_t at = hash(key);
            while (slots_[at].key != EMPTY && slots_[at].key != key) at = (at + 1) & mask_;
            slots_[at] = Slot{key, value};
        }
    }
    // The rank of (a, b) in the upper 32 bits and the ID it makes in the lower; NONE if it is no merge.
    // Ordering packed values orders pairs by rank.
    uint64_t packed(uint32_t a, uint32_t b) const {
        if ((a | b) < DENSE) return dense_[a * DENSE + b];
        const uint64_t key = pack(a, b);
        for (size_t at = hash(key);; at = (at + 1) & mask_) {
            const Slot &slot = slots_[at];
            if (slot.key == key) return slot.value;
            if (slot.key == EMPTY) return NONE;
        }
    }
    // The rank of (a, b), or NO_RANK; *result gets the ID it makes.
    uint32_t rank(uint32_t a, uint32_t b, uint32_t *result) const {
        const uint64_t value = packed(a, b);
        *result = static_cast<uint32_t>(value);
        return static_cast<uint32_t>(value >> 32);
    }

  private:
    static constexpr uint32_t DENSE = 256;
    struct Slot {
        uint64_t key;
        uint64_t value;  // as packed() gives it
    };
    static constexpr uint64_t EMPTY = UINT64_MAX;  // (2**32-1, 2**32-1): no ID is that large
    static uint64_t pack(uint32_t a, uint32_t b) { return (static_cast<uint64_t>(a) << 32) | b; }
    size_t hash(uint64_t key) const { return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_); }
    std::vector<Slot> slots_;
    std::vector<uint64_t> dense_;
    size_t mask_ = 0;
    int shift_ = 60;
};

// Apply merges to ids[0..n) lowest rank first, the leftmost on ties; returns the new length. Short
// chunks: each pair's rank and the ID it makes packed in one word, rank above, in one small array
// rescanned for the lowest after each merge (the minimum and its first position in one branch-free pass:
// one pair, wherever it occurs, packs to one value, so the first is the leftmost). Chunks are a few IDs, so the
// shifts are plain loops rather than calls to memmove.
inline size_t merge_short(uint32_t *ids, size_t n, const MergeTable &table) {
    uint64_t pairs[SHORT_CHUNK];  // pairs[i]: of (ids[i], ids[i + 1])
    size_t count = n < 2 ? 0 : n - 1;
    for (size_t i = 0; i < count; i++) pairs[i] = table.packed(ids[i], ids[i + 1]);
    while (count) {
        uint64_t lowest = pairs[0];
        size_t best = 0;
        for (size_t i = 1; i < count; i++) {  // the lowest and its first position in one pass, without branches
            const bool lower = pairs[i] < lowest;
            lowest = lower ? pairs[i] : lowest;
            best = lower ? i : best;
        }
        if ((lowest >> 32) == NO_RANK) break;
        ids[best] = static_cast<uint32_t>(lowest);
        for (size_t i = best + 1; i + 1 < n; i++) ids[i] = ids[i + 1];
        for (size_t i = best + 1; i + 1 < count; i++) pairs[i] = pairs[i + 1];
        n--;
        count--;
        if (best > 0) pairs[best - 1] = table.packed(ids[best - 1], ids[best]);
        if (best < count) pairs[best] = table.packed(ids[best], ids[best + 1]);
    }
    return n;
}

// The same in O(n log n): a heap of (rank, position) over a linked list; stale entries are skipped.
inline size_t merge_long(uint32_t *ids, size_t n, const MergeTable &table) {
    constexpr uint32_t GONE = UINT32_MAX;
    std::vector<size_t> next(n), prev(n);
    for (size_t i = 0; i < n; i++) next[i] = i + 1, prev[i] = i - 1;  // prev[0] wraps: never read
    using Entry = std::pair<uint32_t, size_t>;
    std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
    uint32_t made = 0;
    for (size_t i = 0; i + 1 < n; i++) {
        const uint32_t r = table.rank(ids[i], ids[i + 1], &made);
        if (r != NO_RANK) heap.emplace(r, i);
    }
    while (!heap.empty()) {
        const auto [r, i] = heap.top();
        heap.pop();
        const size_t j = next[i];
        if (ids[i] == GONE || j >= n || table.rank(ids[i], ids[j], &made) != r) continue;
        ids[i] = made;
        ids[j] = GONE;
        next[i] = next[j];
        if (next[j] < n) prev[next[j]] = i;
        if (i > 0) {
            const size_t left = prev[i];
            const uint32_t lr = table.rank(ids[left], ids[i], &made);
            if (lr != NO_RANK) heap.emplace(lr, left);
        }
        if (next[i] < n) {
            const uint32_t rr = table.rank(ids[i], ids[next[i]], &made);
            if (rr != NO_RANK) heap.emplace(rr, i);
        }
    }
    size_t kept = 0;
    for (size_t i = 0; i < n; i++)
        if (ids[i] != GONE) ids[kept++] = ids[i];
    return kept;
}

inline size_t apply_merges(uint32_t *ids, size_t n, const MergeTable &table) {
    return n < SHORT_CHUNK ? merge_short(ids, n, table) : merge_long(ids, n, table);
}

}  // namespace lmprep_native
