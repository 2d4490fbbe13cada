// The native encoder's chunk cache: chunk (UTF-8 key) -> IDs, bounded in bytes.
// Part of the native tokenizer core (_native.cpp includes it); no Python API here.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstddef>
#include <cstring>
#include <memory>
#include <mutex>
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

// How an entry is added to a table: by the one thread that holds the cache (no one reads it meanwhile), or
// beside threads that read it (the adding thread holding the table's writer lock).
enum class Access { alone, shared };

// chunk (its code points as UTF-8, surrogates written like any other code point) -> its IDs.
// Bounded in bytes as encoder.PythonEncoder is (encoder.py): an entry that would take the total past max_bytes empties
// the table first, so it starts over on endless streams.
//
// A lookup touches as little memory as it can, since on text that repeats little it waits on memory
// more than it computes: a slot is 16 bytes and holds the key's first 8 bytes, so a short chunk (most
// are) is told apart in its slot alone; its IDs, followed by the rest of a longer key, lie in one
// arena of 32-bit words.
//
// Lookups take no lock, and one writer at a time (Access::shared: under the table's writer lock) adds entries while
// they run. An entry is written into an empty slot, and its key length, which marks the slot as taken, is stored
// last (release), so that a lookup that sees it (acquire) sees the whole entry; a taken slot never changes, but an
// empty one may be taken by any key at any moment, so a lookup goes by what its probe saw (place_in), never by a
// second look at the slot. The slots and the arena are never moved under a lookup: to grow, a writer fills larger
// ones and publishes them, and the old ones stay readable until settle(), which the caller runs when no lookup can
// be under way (the cache held exclusively). A table that reaches its bound beside readers takes no entry more
// until then, when it starts over.
class alignas(64) ChunkTable {
  public:
    size_t max_bytes = 256 * 1000 * 1000;  // changed only while the cache is held exclusively

    ChunkTable() = default;
    ChunkTable(const ChunkTable &) = delete;
    ChunkTable &operator=(const ChunkTable &) = delete;

    size_t count() const { return count_.load(std::memory_order_relaxed); }
    size_t nbytes() const { return nbytes_.load(std::memory_order_relaxed); }

    // The IDs of the chunk, or nullptr; *length gets how many. They stay where they are until settle() or
    // an entry added alone.
    const uint32_t *find(const Key &key, size_t *length) const {
        const SlotArray &array = *slots_.load(std::memory_order_acquire);
        const Place place = place_in(array, key);
        if (!place.found) return nullptr;
        const Slot &slot = array.slots[place.at];
        *length = slot.ids_length;
        return inline_id(slot.key_length, slot.ids_length) ? &slot.at : words_.load(std::memory_order_acquire) + slot.at;
    }

    // Asks for the slot where a lookup of hash starts, ahead of the lookup (a hint: any hash is fine).
    void prefetch(uint64_t hash) const {
        const SlotArray &array = *slots_.load(std::memory_order_acquire);
        __builtin_prefetch(array.slots + (hash & array.mask));
    }

    // Adds the chunk unless it is held already (alone: the caller holds the cache exclusively; shared: the
    // caller holds it shared, and the writer lock is taken here). Returns whether settle() has work.
    bool insert(const Key &key, const uint32_t *ids, size_t length, Access access) {
        std::unique_lock<std::mutex> hold(writer_, std::defer_lock);
        if (access == Access::shared) hold.lock();
        add(key, ids, length, access);
        return unsettled_;
    }

    // Frees what lookups may have been reading, and starts over if the bound was reached. No lookup may be
    // under way (the cache held exclusively).
    void settle() {
        retired_slots_.clear();
        retired_words_.clear();
        unsettled_ = false;
        if (full_) clear();
    }

    void clear() {
        slots_owned_.reset();
        words_owned_.reset();
        retired_slots_.clear();
        retired_words_.clear();
        slots_.store(&NO_SLOTS, std::memory_order_release);
        words_.store(nullptr, std::memory_order_release);
        capacity_ = words_used_ = words_capacity_ = 0;
        nbytes_.store(0, std::memory_order_relaxed);
        count_.store(0, std::memory_order_relaxed);
        full_ = unsettled_ = false;
    }

  private:
    static constexpr size_t PREFIX = 8;  // bytes of the key held in its slot
    static constexpr size_t MIN_SLOTS = 1024, MIN_WORDS = 4096;
    struct Slot {
        uint64_t prefix;      // the key's first 8 bytes, zero-padded
        uint32_t at;          // its IDs in the arena, then the key's bytes past the prefix; or its one ID
        uint16_t key_length;  // 0: an empty slot (no chunk is empty); stored last, read by taken()
        uint16_t ids_length;
    };
    // A table's slots and their mask, which a lookup reads through one pointer, so that it never pairs an
    // array with another's mask. (Not a header before the slots: the arrays, as large allocations, start at
    // the same offset in a page, and 16 such headers would compete for one set of the first-level cache.)
    struct SlotArray {
        size_t mask;
        const Slot *slots;
    };
    struct OwnedSlots {
        std::unique_ptr<Slot[]> slots;
        SlotArray array;
    };
    static constexpr Slot NO_SLOT{0, 0, 0, 0};
    static constexpr SlotArray NO_SLOTS{0, &NO_SLOT};  // where an empty table's lookups look: one empty slot

    void add(const Key &key, const uint32_t *ids, size_t length, Access access) {
        if (key.length == 0 || key.length > UINT16_MAX || length > UINT16_MAX) return;  // not kept
        const size_t entry = key.length + 4 * length + ENTRY_OVERHEAD;
        if (place_in(published(), key).found) return;
        const size_t words = inline_id(key.length, length) ? 0 : length + (rest_length(key.length) + 3) / 4;
        if (full_ || nbytes() + entry > max_bytes || words_used_ + words > UINT32_MAX) {
            if (access == Access::shared) {
                full_ = unsettled_ = true;  // starts over at settle()
                return;
            }
            clear();
        }
        if (entry > max_bytes) return;
        if (2 * (count() + 1) > capacity_) grow(access);
        // the arena first: if it cannot grow (bad_alloc), no slot points past what it holds
        const uint32_t at = words == 0 ? ids[0] : static_cast<uint32_t>(words_used_);
        if (words != 0) {
            make_room(words, access);
            uint32_t *into = words_owned_.get() + at;
            std::memcpy(into, ids, 4 * length);
            if (key.length > PREFIX) std::memcpy(into + length, key.data + PREFIX, key.length - PREFIX);
            words_used_ += words;
        }
        Slot &slot = slots_owned_->slots[place_in(published(), key).at];
        slot.prefix = key.prefix;
        slot.at = at;
        slot.ids_length = static_cast<uint16_t>(length);
        __atomic_store_n(&slot.key_length, static_cast<uint16_t>(key.length), __ATOMIC_RELEASE);
        nbytes_.store(nbytes() + entry, std::memory_order_relaxed);
        count_.store(count() + 1, std::memory_order_relaxed);
    }

    // The slot's key length, 0 if it is empty; once it is not, the rest of the slot may be read.
    static uint16_t taken(const Slot &slot) { return __atomic_load_n(&slot.key_length, __ATOMIC_ACQUIRE); }
    // Most chunks are one ID and a few bytes: the slot holds them whole, and a hit reads nothing else.
    static bool inline_id(size_t key_length, size_t ids_length) { return ids_length == 1 && key_length <= PREFIX; }
    static size_t rest_length(size_t key_length) { return key_length > PREFIX ? key_length - PREFIX : 0; }
    const SlotArray &published() const { return *slots_.load(std::memory_order_relaxed); }

    // Where a probe of `array` for the key ended: at the slot that holds it (found), or at the empty one where
    // it would go. Beside a writer, only what the probe saw tells which: the empty slot may be taken by
    // another key the moment after, and read again then, it would give that key's IDs.
    struct Place {
        size_t at;
        bool found;
    };
    Place place_in(const SlotArray &array, const Key &key) const {
        const Slot *slots = array.slots;
        const size_t mask = array.mask;
        for (size_t at = key.hash & mask;; at = (at + 1) & mask) {
            const uint16_t length = taken(slots[at]);
            if (length == 0) return {at, false};
            if (same_key(slots[at], length, key)) return {at, true};
        }
    }
    bool same_key(const Slot &slot, uint16_t key_length, const Key &key) const {
        return slot.prefix == key.prefix && key_length == key.length && (key.length <= PREFIX || same_rest(slot, key));
    }
    // Whether the key's bytes past the prefix (it has some) are the slot's (whose prefix and length are the
    // key's): up to 8 of them as one word, in place of a call to memcmp.
    bool same_rest(const Slot &slot, const Key &key) const {
        const char *held = rest_of(slot, words_.load(std::memory_order_acquire));
        const size_t rest = key.length - PREFIX;
        if (rest <= 8) return tail_word(held, rest) == tail_word(key.data + PREFIX, rest);
        return std::memcmp(held, key.data + PREFIX, rest) == 0;
    }
    static const char *rest_of(const Slot &slot, const uint32_t *words) {
        return reinterpret_cast<const char *>(words + slot.at + slot.ids_length);
    }
    // The hash of a slot's key: a short one's bytes are its prefix in place (little-endian, as prefix_of packs
    // them), a longer one's prefix is followed by the rest in the arena.
    uint64_t hash_of(const Slot &slot) const {
        static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "a prefix's bytes are the key's in memory order");
        if (slot.key_length <= PREFIX)
            return hash_key(slot.prefix, reinterpret_cast<const char *>(&slot.prefix), slot.key_length);
        char bytes[UINT16_MAX];
        std::memcpy(bytes, &slot.prefix, PREFIX);
        std::memcpy(bytes + PREFIX, rest_of(slot, words_owned_.get()), slot.key_length - PREFIX);
        return hash_key(slot.prefix, bytes, slot.key_length);
    }

    // Old memory that lookups beside the writer may still read is kept until settle(); alone, it goes now.
    // Room to keep it is made before the new memory is published (a failure then leaves the table as it was).
    template <typename Owner>
    void replace(Owner &owned, Owner fresh, std::vector<Owner> &retired, Access access) {
        if (access == Access::shared) retired.emplace_back();
        std::swap(owned, fresh);
        if (access == Access::shared) {
            retired.back() = std::move(fresh);
            unsettled_ = true;
        }
    }

    void grow(Access access) {
        const size_t capacity = std::max(MIN_SLOTS, 2 * capacity_);
        std::unique_ptr<OwnedSlots> grown(new OwnedSlots{std::unique_ptr<Slot[]>(new Slot[capacity]()), {}});
        Slot *into = grown->slots.get();
        grown->array = SlotArray{capacity - 1, into};
        const Slot *from = published().slots;
        for (size_t s = 0; s < capacity_; s++) {
            const Slot &slot = from[s];
            if (slot.key_length == 0) continue;
            size_t at = hash_of(slot) & (capacity - 1);
            while (into[at].key_length != 0) at = (at + 1) & (capacity - 1);
            into[at] = slot;
        }
        const SlotArray *array = &grown->array;
        replace(slots_owned_, std::move(grown), retired_slots_, access);
        slots_.store(array, std::memory_order_release);
        capacity_ = capacity;
    }

    // Room in the arena for `words` more.
    void make_room(size_t words, Access access) {
        if (words_used_ + words <= words_capacity_) return;
        const size_t capacity = std::max({MIN_WORDS, 2 * words_capacity_, words_used_ + words});
        std::unique_ptr<uint32_t[]> grown(new uint32_t[capacity]);
        if (words_used_ != 0) std::memcpy(grown.get(), words_owned_.get(), 4 * words_used_);
        const uint32_t *published = grown.get();
        replace(words_owned_, std::move(grown), retired_words_, access);
        words_.store(published, std::memory_order_release);
        words_capacity_ = capacity;
    }

    // What lookups read, on a cache line of its own: the writer's fields below change with every entry.
    std::atomic<const SlotArray *> slots_{&NO_SLOTS};
    std::atomic<const uint32_t *> words_{nullptr};
    // The writer's (under writer_, or alone): what adding any entry reads, on one cache line...
    alignas(64) std::unique_ptr<OwnedSlots> slots_owned_;
    std::unique_ptr<uint32_t[]> words_owned_;
    size_t capacity_ = 0, words_used_ = 0, words_capacity_ = 0;
    std::atomic<size_t> nbytes_{0}, count_{0};  // atomic only so that they may be read beside the writer
    bool full_ = false;
    bool unsettled_ = false;  // settle() has work: memory kept for lookups, or full_
    // ... then what only adding beside lookups, or settling, touches.
    std::mutex writer_;
    std::vector<std::unique_ptr<OwnedSlots>> retired_slots_;
    std::vector<std::unique_ptr<uint32_t[]>> retired_words_;
};

// The chunk cache: SHARDS tables, a key's among them chosen by its hash's top bits (its slot by the low
// ones), so that threads adding entries seldom wait for the same table's writer lock. Bounded in bytes as
// a whole: each shard to its share of the bound.
class ChunkCache {
  public:
    static constexpr size_t SHARDS = 16;

    ChunkCache() { bound(256 * 1000 * 1000); }

    const uint32_t *find(const Key &key, size_t *length) const { return of(key.hash).find(key, length); }
    void prefetch(uint64_t hash) const { of(hash).prefetch(hash); }
    void insert(const Key &key, const uint32_t *ids, size_t length, Access access) {
        if (of(key.hash).insert(key, ids, length, access) && access == Access::shared)
            unsettled_.store(true, std::memory_order_relaxed);
    }

    size_t max_bytes() const { return max_bytes_; }
    size_t count() const { return total(&ChunkTable::count); }
    size_t nbytes() const { return total(&ChunkTable::nbytes); }

    // Whether settle() has work: entries added beside lookups left memory behind or reached the bound.
    bool unsettled() const { return unsettled_.load(std::memory_order_relaxed); }
    // Frees what lookups may have been reading, and starts over each shard that reached its bound. The cache
    // held exclusively.
    void settle() {
        for (ChunkTable &table : shards_) table.settle();
        unsettled_.store(false, std::memory_order_relaxed);
    }

    // Keep at most about max_bytes: a shard past its share starts over. The cache held exclusively.
    void bound(size_t max_bytes) {
        max_bytes_ = max_bytes;
        for (ChunkTable &table : shards_) {
            table.max_bytes = max_bytes / SHARDS;
            if (table.nbytes() > table.max_bytes) table.clear();
        }
    }
    void clear() {
        for (ChunkTable &table : shards_) table.clear();
    }

  private:
    static size_t index(uint64_t hash) { return static_cast<size_t>(hash >> 60); }
    const ChunkTable &of(uint64_t hash) const { return shards_[index(hash)]; }
    ChunkTable &of(uint64_t hash) { return shards_[index(hash)]; }
    size_t total(size_t (ChunkTable::*field)() const) const {
        size_t sum = 0;
        for (const ChunkTable &table : shards_) sum += (table.*field)();
        return sum;
    }
    static_assert(SHARDS == 16, "index() takes the top 4 bits");
    ChunkTable shards_[SHARDS];
    size_t max_bytes_ = 0;
    std::atomic<bool> unsettled_{false};
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
