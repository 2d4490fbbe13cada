// The native encoder's chunk cache: chunk (UTF-8 key) -> IDs, bounded in bytes.
// Part of the native tokenizer core (_native.cpp includes it); no Python API here.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

namespace lmprep_native {

// ---- the chunk cache ----------------------------------------------------------------------------

constexpr size_t CACHE_MAX_CHUNK = 256;  // longer chunks (in characters) are encoded but never kept
constexpr size_t ENTRY_OVERHEAD = 48;    // bytes an entry costs beyond its key and IDs (its slot, load slack)

inline uint64_t hash_bytes(const char *data, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xFF51AFD7ED558CCDull);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t word;
        std::memcpy(&word, data + i, 8);
        h = (h ^ word) * 0xBF58476D1CE4E5B9ull;
        h ^= h >> 31;
    }
    uint64_t tail = 0;
    std::memcpy(&tail, data + i, n - i);
    h = (h ^ tail) * 0x94D049BB133111EBull;
    return h ^ (h >> 29);
}

// chunk (its code points as UTF-8, surrogates written like any other code point) -> its IDs.
// Bounded in bytes like encoder.ChunkCache: an entry that would take the total past max_bytes empties
// the table first, so it starts over on endless streams.
class ChunkTable {
  public:
    size_t max_bytes = 256 * 1000 * 1000;
    size_t nbytes = 0;
    size_t count = 0;

    // The IDs of the chunk, or nullptr; *length gets how many.
    const uint32_t *find(uint64_t hash, const char *key, size_t key_length, size_t *length) const {
        if (slots_.empty()) return nullptr;
        for (size_t at = hash & mask_;; at = (at + 1) & mask_) {
            const Slot &slot = slots_[at];
            if (slot.key_length == 0) return nullptr;
            if (slot.hash == hash && slot.key_length == key_length &&
                std::memcmp(keys_.data() + slot.key_at, key, key_length) == 0) {
                *length = slot.ids_length;
                return ids_.data() + slot.ids_at;
            }
        }
    }

    void insert(uint64_t hash, const char *key, size_t key_length, const uint32_t *ids, size_t length) {
        const size_t entry = key_length + 4 * length + ENTRY_OVERHEAD;
        if (nbytes + entry > max_bytes) clear();
        if (entry > max_bytes) return;
        if (2 * (count + 1) > slots_.size()) grow();
        size_t at = hash & mask_;
        while (slots_[at].key_length != 0) at = (at + 1) & mask_;
        slots_[at] = Slot{hash, keys_.size(), ids_.size(), static_cast<uint32_t>(key_length),
                          static_cast<uint32_t>(length)};
        keys_.insert(keys_.end(), key, key + key_length);
        ids_.insert(ids_.end(), ids, ids + length);
        nbytes += entry;
        count++;
    }

    // Take the entries of other (leaving it empty), keeping this table's bound: for an empty table, in
    // place of inserting them one by one.
    void take(ChunkTable &other) {
        const size_t bound = max_bytes;
        std::swap(*this, other);
        other.clear();
        other.max_bytes = max_bytes;
        max_bytes = bound;
        if (nbytes > max_bytes) clear();
    }

    // Calls visit(hash, key, key_length, ids, length) for each entry.
    template <typename Visit>
    void each(Visit &&visit) const {
        for (const Slot &slot : slots_)
            if (slot.key_length != 0)
                visit(slot.hash, keys_.data() + slot.key_at, slot.key_length, ids_.data() + slot.ids_at, slot.ids_length);
    }

    void clear() {
        std::vector<Slot>().swap(slots_);
        std::vector<char>().swap(keys_);
        std::vector<uint32_t>().swap(ids_);
        mask_ = 0;
        nbytes = count = 0;
    }

  private:
    struct Slot {
        uint64_t hash;
        size_t key_at, ids_at;
        uint32_t key_length, ids_length;  // key_length 0: an empty slot (no chunk is empty)
    };

    void grow() {
        std::vector<Slot> old(std::max<size_t>(1024, 2 * slots_.size()), Slot{0, 0, 0, 0, 0});
        old.swap(slots_);
        mask_ = slots_.size() - 1;
        for (const Slot &slot : old) {
            if (slot.key_length == 0) continue;
            size_t at = slot.hash & mask_;
            while (slots_[at].key_length != 0) at = (at + 1) & mask_;
            slots_[at] = slot;
        }
    }

    std::vector<Slot> slots_;
    std::vector<char> keys_;
    std::vector<uint32_t> ids_;
    size_t mask_ = 0;
};

// Writes the UTF-8 of code point c at `at` (a surrogate too: the key only needs to be distinct); returns
// where it ends. The caller leaves room for four bytes.
inline char *write_utf8(char *at, uint32_t c) {
    if (c < 0x80) {
        *at++ = static_cast<char>(c);
    } else if (c < 0x800) {
        *at++ = static_cast<char>(0xC0 | (c >> 6));
        *at++ = static_cast<char>(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
        *at++ = static_cast<char>(0xE0 | (c >> 12));
        *at++ = static_cast<char>(0x80 | ((c >> 6) & 0x3F));
        *at++ = static_cast<char>(0x80 | (c & 0x3F));
    } else {
        *at++ = static_cast<char>(0xF0 | (c >> 18));
        *at++ = static_cast<char>(0x80 | ((c >> 12) & 0x3F));
        *at++ = static_cast<char>(0x80 | ((c >> 6) & 0x3F));
        *at++ = static_cast<char>(0x80 | (c & 0x3F));
    }
    return at;
}

inline bool is_surrogate(uint32_t c) { return c >= 0xD800 && c <= 0xDFFF; }

}  // namespace lmprep_native
