// The native encoder's chunk cache: chunk (UTF-8 key) -> IDs, bounded in bytes.
// Part of the native tokenizer core (_native.cpp includes it); no Python API here.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstddef>
#include <cstring>
#include <new>
#include <string>
#include <vector>

namespace lmprep_native {

// ---- the chunk cache ----------------------------------------------------------------------------

constexpr size_t CACHE_MAX_CHUNK = 256;  // longer chunks (in characters) are encoded but never kept
constexpr size_t ENTRY_OVERHEAD = 48;    // bytes an entry costs beyond its key and IDs (its slot, load slack)

// The r < 8 bytes at data as one little-endian word, zero above (what memcpy into a zeroed word gives),
// read with two loads that may overlap instead of a call to memcpy of a variable size.
inline uint64_t tail_word(const char *data, size_t r) {
    const auto byte = [&](size_t i) { return uint64_t{static_cast<unsigned char>(data[i])}; };
    if (r >= 4) {
        uint32_t low, high;
        std::memcpy(&low, data, 4);
        std::memcpy(&high, data + r - 4, 4);
        return low | (uint64_t{high} << (8 * (r - 4)));
    }
    if (r == 0) return 0;
    return byte(0) | (byte(r / 2) << (8 * (r / 2))) | (byte(r - 1) << (8 * (r - 1)));
}

inline uint64_t load_word(const char *data) {
    uint64_t word;
    std::memcpy(&word, data, 8);
    return word;
}

// The first 8 bytes of a key, zero-padded: what a cache slot holds of it (and, for a short key, all).
inline uint64_t prefix_of(const char *key, size_t key_length) {
    return key_length >= 8 ? load_word(key) : tail_word(key, key_length);
}

// As prefix_of, for a key of 1 to 8 bytes that at least 8 - key_length readable bytes precede (from
// `readable` on): one load ending where the key ends, shifted, in place of two loads that depend on the
// length's branches.
inline uint64_t prefix_after(const char *readable, const char *key, size_t key_length) {
    if (key_length >= 8) return load_word(key);
    if (key + key_length < readable + 8) return tail_word(key, key_length);
    return load_word(key + key_length - 8) >> (8 * (8 - key_length));
}

// The hash of a key whose prefix is given (the one hash of keys: the cache's, its growth's and the
// chunk counter's).
inline uint64_t hash_key(uint64_t prefix, const char *data, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xFF51AFD7ED558CCDull);
    size_t i = 0;
    if (n >= 8) {
        h = (h ^ prefix) * 0xBF58476D1CE4E5B9ull;
        h ^= h >> 31;
        for (i = 8; i + 8 <= n; i += 8) {
            h = (h ^ load_word(data + i)) * 0xBF58476D1CE4E5B9ull;
            h ^= h >> 31;
        }
        prefix = tail_word(data + i, n - i);
    }
    h = (h ^ prefix) * 0x94D049BB133111EBull;
    return h ^ (h >> 29);
}

inline uint64_t hash_bytes(const char *data, size_t n) { return hash_key(prefix_of(data, n), data, n); }

// A chunk's key as the cache compares it: its bytes, its prefix and its hash, computed once.
struct Key {
    const char *data;
    size_t length;
    uint64_t prefix;
    uint64_t hash;
};

// chunk (its code points as UTF-8, surrogates written like any other code point) -> its IDs.
// Bounded in bytes as encoder.PythonEncoder is (encoder.py): an entry that would take the total past max_bytes empties
// the table first, so it starts over on endless streams.
//
// A lookup touches as little memory as it can, since on text that repeats little it waits on memory
// more than it computes: a slot is 16 bytes and holds the key's first 8 bytes, so a short chunk (most
// are) is told apart in its slot alone; its IDs, followed by the rest of a longer key, lie in one
// arena of 32-bit words.
class alignas(64) ChunkTable {
  public:
    size_t max_bytes = 256 * 1000 * 1000;
    size_t nbytes = 0;
    size_t count = 0;

    ChunkTable() = default;
    ChunkTable(const ChunkTable &) = delete;  // at_ points into slots_
    ChunkTable &operator=(const ChunkTable &) = delete;

    // The IDs of the chunk, or nullptr; *length gets how many. They stay where they are until the table
    // changes.
    const uint32_t *find(const Key &key, size_t *length) const {
        const Slot &slot = at_[place_of(key)];
        if (slot.key_length == 0) return nullptr;
        *length = slot.ids_length;
        return ids_of(slot);
    }

    // Asks for the slot where a lookup of hash starts, ahead of the lookup (a hint: any hash is fine).
    void prefetch(uint64_t hash) const { __builtin_prefetch(at_ + (hash & mask_)); }

    // Adds the chunk unless it is held already.
    void insert(const Key &key, const uint32_t *ids, size_t length) {
        const size_t entry = key.length + 4 * length + ENTRY_OVERHEAD;
        if (key.length == 0 || key.length > UINT16_MAX || length > UINT16_MAX) return;  // not kept
        size_t slot = place_of(key);
        if (at_[slot].key_length != 0) return;
        const size_t words = inline_id(key.length, length) ? 0 : length + (rest_length(key.length) + 3) / 4;
        if (nbytes + entry > max_bytes || arena_.size() + words > UINT32_MAX) clear();
        if (entry > max_bytes) return;
        if (2 * (count + 1) > slots_.size()) {
            grow();
            slot = place_of(key);
        }
        // the arena first: if it cannot grow (bad_alloc), no slot points past its end
        const uint32_t at = words == 0 ? ids[0] : static_cast<uint32_t>(arena_.size());
        if (words != 0) {
            arena_.resize(arena_.size() + words);
            std::memcpy(arena_.data() + at, ids, 4 * length);
            if (key.length > PREFIX) std::memcpy(arena_.data() + at + length, key.data + PREFIX, key.length - PREFIX);
        }
        slots_[slot] = Slot{key.prefix, at, static_cast<uint16_t>(key.length), static_cast<uint16_t>(length)};
        nbytes += entry;
        count++;
    }

    // Take the entries of other (leaving it empty), keeping this table's bound: for an empty table, in
    // place of inserting them one by one.
    void take(ChunkTable &other) {
        slots_.swap(other.slots_);
        arena_.swap(other.arena_);
        std::swap(mask_, other.mask_);
        std::swap(nbytes, other.nbytes);
        std::swap(count, other.count);
        at_ = slots_.empty() ? &NO_SLOTS : slots_.data();
        other.clear();
        if (nbytes > max_bytes) clear();
    }

    // Calls visit(key, ids, length) for each entry.
    template <typename Visit>
    void each(Visit &&visit) const {
        char bytes[UINT16_MAX];
        for (const Slot &slot : slots_)
            if (slot.key_length != 0) visit(key_in(slot, bytes), ids_of(slot), size_t{slot.ids_length});
    }

    void clear() {
        std::vector<Slot>().swap(slots_);
        std::vector<uint32_t>().swap(arena_);
        at_ = &NO_SLOTS;
        mask_ = 0;
        nbytes = count = 0;
    }
    // Empty, keeping the memory: for a table that fills again much as before (a thread's new chunks, round
    // after round), which then need not grow again from nothing.
    void empty() {
        std::fill(slots_.begin(), slots_.end(), Slot{0, 0, 0, 0});
        arena_.clear();
        nbytes = count = 0;
    }

  private:
    static constexpr size_t PREFIX = 8;  // bytes of the key held in its slot
    static constexpr size_t MIN_SLOTS = 1024;
    struct Slot {
        uint64_t prefix;      // the key's first 8 bytes, zero-padded
        uint32_t at;          // its IDs in the arena, then the key's bytes past the prefix; or its one ID
        uint16_t key_length;  // 0: an empty slot (no chunk is empty)
        uint16_t ids_length;
    };
    static constexpr Slot NO_SLOTS{0, 0, 0, 0};  // where an empty table's lookups look: one empty slot

    // Most chunks are one ID and a few bytes: the slot holds them whole, and a hit reads nothing else.
    static bool inline_id(size_t key_length, size_t ids_length) { return ids_length == 1 && key_length <= PREFIX; }
    const uint32_t *ids_of(const Slot &slot) const {
        return inline_id(slot.key_length, slot.ids_length) ? &slot.at : arena_.data() + slot.at;
    }
    static size_t rest_length(size_t key_length) { return key_length > PREFIX ? key_length - PREFIX : 0; }
    // The slot that holds the key, or the empty one where it would go.
    size_t place_of(const Key &key) const {
        size_t at = key.hash & mask_;
        while (at_[at].key_length != 0 && !same_key(at_[at], key)) at = (at + 1) & mask_;
        return at;
    }
    bool same_key(const Slot &slot, const Key &key) const {
        return slot.prefix == key.prefix && slot.key_length == key.length && (key.length <= PREFIX || same_rest(slot, key));
    }
    // Whether the key's bytes past the prefix (it has some) are the slot's (whose prefix and length are the
    // key's): up to 8 of them as one word, in place of a call to memcmp.
    bool same_rest(const Slot &slot, const Key &key) const {
        const size_t rest = key.length - PREFIX;
        if (rest <= 8) return tail_word(rest_of(slot), rest) == tail_word(key.data + PREFIX, rest);
        return std::memcmp(rest_of(slot), key.data + PREFIX, rest) == 0;
    }
    const char *rest_of(const Slot &slot) const {
        return reinterpret_cast<const char *>(arena_.data() + slot.at + slot.ids_length);
    }
    // A slot's key: a short one's bytes are its prefix in place (little-endian, as prefix_of packs them),
    // a longer one's are copied into bytes.
    Key key_in(const Slot &slot, char *bytes) const {
        static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "a prefix's bytes are the key's in memory order");
        const char *data = reinterpret_cast<const char *>(&slot.prefix);
        if (slot.key_length > PREFIX) {
            std::memcpy(bytes, &slot.prefix, PREFIX);
            std::memcpy(bytes + PREFIX, rest_of(slot), slot.key_length - PREFIX);
            data = bytes;
        }
        return Key{data, slot.key_length, slot.prefix, hash_key(slot.prefix, data, slot.key_length)};
    }

    void grow() {
        std::vector<Slot> old(std::max(MIN_SLOTS, 2 * slots_.size()), Slot{0, 0, 0, 0});
        old.swap(slots_);
        at_ = slots_.data();
        mask_ = slots_.size() - 1;
        char bytes[UINT16_MAX];
        for (const Slot &slot : old) {
            if (slot.key_length == 0) continue;
            size_t at = key_in(slot, bytes).hash & mask_;
            while (slots_[at].key_length != 0) at = (at + 1) & mask_;
            slots_[at] = slot;
        }
    }

    std::vector<Slot> slots_;
    const Slot *at_ = &NO_SLOTS;  // slots_, or NO_SLOTS while there are none
    std::vector<uint32_t> arena_;
    size_t mask_ = 0;
};

// The chunk cache: SHARDS tables, a key's among them chosen by its hash's top bits (its slot by the low
// ones), so that the threads of a call can add their new chunks to different shards at once. Bounded in
// bytes as a whole: each shard to its share of the bound.
class ChunkCache {
  public:
    static constexpr size_t SHARDS = 16;

    ChunkCache() { bound(256 * 1000 * 1000); }

    const uint32_t *find(const Key &key, size_t *length) const { return of(key.hash).find(key, length); }
    void prefetch(uint64_t hash) const { of(hash).prefetch(hash); }
    void insert(const Key &key, const uint32_t *ids, size_t length) { of(key.hash).insert(key, ids, length); }

    ChunkTable &shard(size_t s) { return shards_[s]; }
    size_t max_bytes() const { return max_bytes_; }
    size_t count() const { return total(&ChunkTable::count); }
    size_t nbytes() const { return total(&ChunkTable::nbytes); }

    // Keep at most about max_bytes: a shard past its share starts over.
    void bound(size_t max_bytes) {
        max_bytes_ = max_bytes;
        for (ChunkTable &table : shards_) {
            table.max_bytes = max_bytes / SHARDS;
            if (table.nbytes > table.max_bytes) table.clear();
        }
    }
    void clear() {
        for (ChunkTable &table : shards_) table.clear();
    }

  private:
    static size_t index(uint64_t hash) { return static_cast<size_t>(hash >> 60); }
    const ChunkTable &of(uint64_t hash) const { return shards_[index(hash)]; }
    ChunkTable &of(uint64_t hash) { return shards_[index(hash)]; }
    size_t total(size_t ChunkTable::*field) const {
        size_t sum = 0;
        for (const ChunkTable &table : shards_) sum += table.*field;
        return sum;
    }
    static_assert(SHARDS == 16, "index() takes the top 4 bits");
    ChunkTable shards_[SHARDS];
    size_t max_bytes_ = 0;
};

// Add the entries of from to into (leaving from empty, its memory kept): those into lacks, into's bound kept.
// Out of memory (bad_alloc), into starts over.
inline void absorb(ChunkTable &into, ChunkTable &from) {
    if (from.count == 0) return;
    if (into.count == 0) {
        into.take(from);
        return;
    }
    try {
        from.each([&](const Key &key, const uint32_t *ids, size_t length) { into.insert(key, ids, length); });
    } catch (const std::bad_alloc &) {
        into.clear();
    }
    from.empty();
}

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
