// BPE training in the native core: counting distinct chunks over the hand-written pre-tokenizer, with
// threads, and the merge loop over the distinct chunks.
// Part of the native tokenizer core (_native.cpp includes it); no Python API here.
//
// reference.train is the definition: the counts here are exactly _train_count's and the merges exactly
// the reference's, which tests/tokenizer/test_native_train.py checks on random text.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstddef>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "_native_cache.h"
#include "_native_split.h"
#include "_native_threads.h"

namespace lmprep_native {

// The separator of the layout of _train_pairs: the last code point, between chunks, never a symbol.
constexpr int32_t SEPARATOR = 0x10FFFF;

// ---- counting distinct chunks ---------------------------------------------------------------------

// chunk (its code points as UTF-8, surrogates written like any other code point) -> how often it occurs.
// Open addressing with linear probing, at most half full; the keys lie one after another in one string.
class CountTable {
  public:
    void add(uint64_t hash, const char *key, size_t length, int64_t times) {
        if (2 * (count_ + 1) > slots_.size()) grow();
        size_t at = hash & mask_;
        for (;; at = (at + 1) & mask_) {
            Slot &slot = slots_[at];
            if (slot.key_length == 0) break;
            if (slot.hash == hash && slot.key_length == length && std::memcmp(keys_.data() + slot.key_at, key, length) == 0) {
                slot.count += times;
                return;
            }
        }
        slots_[at] = Slot{hash, keys_.size(), length, times};
        keys_.append(key, length);
        count_++;
    }

    // Adds every entry of other to this table, and empties other.
    void absorb(CountTable &other) {
        if (other.count_ > count_) std::swap(*this, other);  // most additions then hit existing keys
        other.for_each([this](const Slot &slot, const char *key) { add(slot.hash, key, slot.key_length, slot.count); });
        other = CountTable();
    }

    size_t size() const { return count_; }

    // The serialised form, how counts travel between processes (one buffer, no object per chunk): a header
    // (SERIAL_MAGIC and the split mode as uint32, the entry count as uint64), then every key's length
    // (uint32), the keys one after another, every count (int64); all in the machine's byte order, which the
    // magic checks. The entries come in the table's order, so equal tables may serialise differently.
    static constexpr uint32_t SERIAL_MAGIC = 0x4C4D4343;  // "CCML" read little-endian
    static constexpr size_t SERIAL_HEADER = 2 * sizeof(uint32_t) + sizeof(uint64_t);

    // Throws length_error for a key of 4 GiB or more, which the form cannot hold.
    size_t serialized_size() const {
        for_each([](const Slot &slot, const char *) {
            if (slot.key_length > UINT32_MAX) throw std::length_error("a chunk of 4 GiB or more cannot be serialised");
        });
        return SERIAL_HEADER + count_ * (sizeof(uint32_t) + sizeof(int64_t)) + keys_.size();
    }

    // Writes serialized_size() bytes at out.
    void serialize(int mode, char *out) const {
        const uint32_t header[2] = {SERIAL_MAGIC, static_cast<uint32_t>(mode)};
        const uint64_t entries = count_;
        out = put(out, header, sizeof(header));
        out = put(out, &entries, sizeof(entries));
        for_each([&out](const Slot &slot, const char *) {
            const uint32_t length = static_cast<uint32_t>(slot.key_length);
            out = put(out, &length, sizeof(length));
        });
        for_each([&out](const Slot &slot, const char *key) { out = put(out, key, slot.key_length); });
        for_each([&out](const Slot &slot, const char *) { out = put(out, &slot.count, sizeof(slot.count)); });
    }

    // Adds the entries of a serialised table of the same split mode. Throws invalid_argument, nothing added,
    // when data is not such a table (a wrong size or header, an empty key, a count below 1).
    void add_serialized(int mode, const char *data, size_t size) {
        uint32_t header[2];
        uint64_t entries;
        if (size < SERIAL_HEADER) throw std::invalid_argument("too short for serialised counts");
        std::memcpy(header, data, sizeof(header));
        std::memcpy(&entries, data + sizeof(header), sizeof(entries));
        if (header[0] != SERIAL_MAGIC) throw std::invalid_argument("not serialised counts (or another byte order)");
        if (header[1] != static_cast<uint32_t>(mode)) throw std::invalid_argument("the counts are of another split mode");
        const size_t fixed = sizeof(uint32_t) + sizeof(int64_t);
        if (entries > (size - SERIAL_HEADER) / fixed) throw std::invalid_argument("serialised counts cut short");
        const char *lengths = data + SERIAL_HEADER, *keys = lengths + entries * sizeof(uint32_t);
        uint64_t key_bytes = 0;
        for (uint64_t i = 0; i < entries; i++) {
            const uint32_t length = get<uint32_t>(lengths, i);
            if (length == 0) throw std::invalid_argument("an empty chunk in serialised counts");
            key_bytes += length;
        }
        if (key_bytes != size - SERIAL_HEADER - entries * fixed)
            throw std::invalid_argument("serialised counts of the wrong size");
        const char *counts = keys + key_bytes;
        for (uint64_t i = 0; i < entries; i++)
            if (get<int64_t>(counts, i) < 1) throw std::invalid_argument("a count below 1 in serialised counts");
        for (uint64_t i = 0; i < entries; i++) {
            const uint32_t length = get<uint32_t>(lengths, i);
            add(hash_bytes(keys, length), keys, length, get<int64_t>(counts, i));
            keys += length;
        }
    }

    // f(key, length, count) for every entry.
    template <typename F>
    void each(F f) const {
        for_each([&f](const Slot &slot, const char *key) { f(key, static_cast<size_t>(slot.key_length), slot.count); });
    }

  private:
    struct Slot {
        uint64_t hash;
        uint64_t key_at, key_length;  // key_length 0: an empty slot (no chunk is empty)
        int64_t count;
    };

    static char *put(char *out, const void *from, size_t n) {
        std::memcpy(out, from, n);
        return out + n;
    }
    template <typename T>
    static T get(const char *array, uint64_t i) {  // element i of an array of T at any alignment
        T value;
        std::memcpy(&value, array + i * sizeof(T), sizeof(T));
        return value;
    }

    template <typename F>
    void for_each(F f) const {
        for (const Slot &slot : slots_)
            if (slot.key_length) f(slot, keys_.data() + slot.key_at);
    }

    void grow() {
        std::vector<Slot> old(std::max<size_t>(1024, 2 * slots_.size()), Slot{0, 0, 0, 0});
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
    std::string keys_;
    size_t mask_ = 0, count_ = 0;
};

struct CountScratch {
    Splitter splitter;
    std::vector<size_t> ends;
    std::string key;
};

template <typename T>
void count_units(const T *s, size_t n, bool ascii, int mode, CountScratch &scratch, CountTable &table) {
    scratch.ends.clear();
    scratch.splitter.split(s, n, mode, scratch.ends);
    size_t start = 0;
    for (size_t end : scratch.ends) {
        if (ascii) {
            scratch.key.assign(reinterpret_cast<const char *>(s + start), end - start);
        } else {
            scratch.key.resize(4 * (end - start));
            char *at = scratch.key.data();
            for (size_t i = start; i < end; i++) at = write_utf8(at, s[i]);
            scratch.key.resize(static_cast<size_t>(at - scratch.key.data()));
        }
        table.add(hash_bytes(scratch.key.data(), scratch.key.size()), scratch.key.data(), scratch.key.size(), 1);
        start = end;
    }
}

inline void count_text(const TextView &text, int mode, CountScratch &scratch, CountTable &table) {
    text.visit([&](const auto *s, bool ascii) { count_units(s, text.length, ascii, mode, scratch, table); });
}

constexpr size_t THREAD_MIN_CHARACTERS = 1 << 16;  // a thread counts at least this many characters (else fewer threads)

// Count the chunks of texts into tables, one table (and one thread) per slice of the texts: slices are
// contiguous and of about equal characters, so how many there are changes only which table a count
// lands in, never the sums. Rethrows (after every thread ended) what a thread threw.
inline void count_texts(const std::vector<TextView> &texts, int mode, std::vector<CountTable> &tables) {
    size_t total = 0;
    for (const TextView &text : texts) total += text.length;
    const size_t threads = std::max<size_t>(1, std::min(tables.size(), total / THREAD_MIN_CHARACTERS));
    // slice t: texts[bounds[t], bounds[t + 1])
    const std::vector<size_t> bounds = balanced_bounds(texts.data(), texts.size(), threads);
    std::vector<std::exception_ptr> failures(bounds.size() - 1);
    run_ranges(bounds.size() - 1, [&](size_t t) {
        try {
            CountScratch scratch;
            for (size_t i = bounds[t]; i < bounds[t + 1]; i++) count_text(texts[i], mode, scratch, tables[t]);
        } catch (...) {
            failures[t] = std::current_exception();
        }
    });
    for (const std::exception_ptr &failure : failures)
        if (failure) std::rethrow_exception(failure);
}

// ---- the byte kind's layout straight from the counts -----------------------------------------------

// UTF-8 of a surrogate as write_utf8 writes it: ED A0..BF xx (valid UTF-8 has ED 80..9F only).
inline bool holds_surrogate(const char *key, size_t length) {
    for (size_t i = 0; i + 1 < length; i++)
        if (static_cast<unsigned char>(key[i]) == 0xED && static_cast<unsigned char>(key[i + 1]) >= 0xA0) return true;
    return false;
}

struct ByteLayoutSize {
    size_t symbols = 1, chunks = 0;  // the layout starts with a separator
    bool surrogate = false;         // a chunk holds a lone surrogate: no byte layout
};

// The size of the byte kind's layout of the counted chunks: only chunks of two bytes or more, as the
// others hold no pair.
inline ByteLayoutSize byte_layout_size(const CountTable &table) {
    ByteLayoutSize size;
    table.each([&size](const char *key, size_t length, int64_t) {
        if (length < 2) return;
        size.symbols += length + 1;
        size.chunks++;
        size.surrogate = size.surrogate || holds_surrogate(key, length);
    });
    return size;
}

// Writes the layout of _train_pairs.utf8_symbols (bytes, separators U+10FFFF) and one count per chunk.
inline void fill_byte_layout(const CountTable &table, int32_t *symbols, int64_t *counts) {
    size_t at = 0, chunk = 0;
    symbols[at++] = SEPARATOR;
    table.each([&](const char *key, size_t length, int64_t count) {
        if (length < 2) return;
        for (size_t i = 0; i < length; i++) symbols[at++] = static_cast<unsigned char>(key[i]);
        symbols[at++] = SEPARATOR;
        counts[chunk++] = count;
    });
}

// ---- the merge loop -------------------------------------------------------------------------------

// The symbols of the layout of _train_pairs: token ID i is the code point i below U+D800 and i + 0x800
// from there, chunks lie between separators U+10FFFF.
inline bool valid_symbol(int64_t s) { return s >= 0 && s <= SEPARATOR && !(s >= 0xD800 && s <= 0xDFFF); }
inline uint32_t id_of_symbol(int64_t s) { return static_cast<uint32_t>(s < 0xD800 ? s : s - 0x800); }

// pair key (left << 32 | right) -> index, open addressing, at most half full; entries are never removed.
class PairIndex {
  public:
    static constexpr uint32_t MISSING = UINT32_MAX;
    uint32_t find(uint64_t key) const {
        if (slots_.empty()) return MISSING;
        for (size_t at = hash(key);; at = (at + 1) & mask_) {
            if (slots_[at].key == key) return slots_[at].value;
            if (slots_[at].key == EMPTY) return MISSING;
        }
    }
    void insert(uint64_t key, uint32_t value) {  // key must be new
        if (2 * (count_ + 1) > slots_.size()) grow();
        size_t at = hash(key);
        while (slots_[at].key != EMPTY) at = (at + 1) & mask_;
        slots_[at] = Slot{key, value};
        count_++;
    }

  private:
    struct Slot {
        uint64_t key;
        uint32_t value;
    };
    static constexpr uint64_t EMPTY = UINT64_MAX;
    size_t hash(uint64_t key) const { return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_); }
    void grow() {
        std::vector<Slot> old(std::max<size_t>(1024, 2 * slots_.size()), Slot{EMPTY, 0});
        old.swap(slots_);
        mask_ = slots_.size() - 1;
        shift_ = 64;
        for (size_t size = slots_.size(); size > 1; size >>= 1) shift_--;
        for (const Slot &slot : old) {
            if (slot.key == EMPTY) continue;
            size_t at = hash(slot.key);
            while (slots_[at].key != EMPTY) at = (at + 1) & mask_;
            slots_[at] = slot;
        }
    }
    std::vector<Slot> slots_;
    size_t mask_ = 0, count_ = 0;
    int shift_ = 64;
};

// The merge loop over the layout of _train_pairs, learning reference.train's merges incrementally: a pair
// is tracked (count, positions where it was born) while it may still be merged (count >= min_frequency,
// no forbidden ID); a lazy max-heap ordered by (highest count, smallest pair) picks each merge; a merge
// visits the positions listed for its pair, ascending, and replaces occurrences left to right.
class PairMerger {
  public:
    using Merge = std::pair<uint32_t, uint32_t>;

    // symbols: the layout (separators first and last); counts: one per chunk. Throws invalid_argument
    // when they do not fit together, length_error past 2**32 - 2 positions.
    PairMerger(const int32_t *symbols, size_t n, const int64_t *counts, size_t chunks, uint32_t first_id,
               int64_t min_frequency, int64_t forbidden)
        : next_id_(first_id), min_frequency_(min_frequency), forbidden_(forbidden) {
        lay_out(symbols, n, counts, chunks);
        count_initial_pairs();
    }

    // Appends up to limit merges (left, right IDs) to out; false when no pair may be merged any more.
    bool merge(size_t limit, std::vector<Merge> &out) {
        for (size_t done = 0; done < limit; done++) {
            const uint32_t best = pop_best();
            if (best == PairIndex::MISSING) return false;
            const uint64_t key = pairs_[best].key;
            out.emplace_back(static_cast<uint32_t>(key >> 32), static_cast<uint32_t>(key));
            merge_pair(best, next_id_++);
        }
        return true;
    }

  private:
    static constexpr uint32_t SEP = UINT32_MAX;       // between chunks
    static constexpr uint32_t DEAD = UINT32_MAX - 1;  // a position merged into its left neighbour
    static constexpr int64_t GONE = -1;               // the count of a pair no longer tracked

    struct Pair {
        uint64_t key;
        int64_t count;
        std::vector<uint32_t> positions;  // where it was born, ascending (some taken apart since)
    };
    struct Entry {  // a heap entry: the pair's count when pushed
        int64_t count;
        uint64_t key;
        uint32_t pair;
    };
    struct Event {  // a merged occurrence seen from one side: the neighbour there, where, how much
        uint32_t neighbour, position;
        int64_t weight;
    };
    static bool heap_order(const Entry &a, const Entry &b) {  // the top: highest count, then smallest pair
        return a.count < b.count || (a.count == b.count && a.key > b.key);
    }
    static uint64_t pack(uint32_t left, uint32_t right) { return static_cast<uint64_t>(left) << 32 | right; }

    bool allowed(uint32_t a, uint32_t b) const { return forbidden_ < 0 || (a != forbidden_ && b != forbidden_); }

    // The layout in IDs, chunks without a pair left out: each position's symbol, links and chunk. The
    // caller's buffers may change under it (another thread holding them while the GIL is released), so
    // each symbol and count is read once and checked as it is read; the first pass only sizes the nodes.
    void lay_out(const int32_t *symbols, size_t n, const int64_t *counts, size_t chunks) {
        if (n < 1 || symbols[0] != SEPARATOR)
            throw std::invalid_argument("the symbols must start and end with a separator");
        size_t kept = 1;
        for (size_t i = 1, start = 0; i < n; i++) {
            if (symbols[i] != SEPARATOR) continue;
            if (i - start >= 3) kept += i - start;  // the chunk's symbols and its separator
            start = i;
        }
        nodes_.reserve(std::min<size_t>(kept, DEAD));
        add_node(SEP, 0);
        std::vector<uint32_t> chunk_ids;  // the IDs of the chunk being read
        size_t chunk = 0;                 // its index among the counts
        int32_t symbol = SEPARATOR;
        for (size_t i = 1; i < n; i++) {
            symbol = symbols[i];
            if (!valid_symbol(symbol)) throw std::invalid_argument("a symbol is not a code point outside the surrogates");
            if (symbol != SEPARATOR) {
                chunk_ids.push_back(id_of_symbol(symbol));
                continue;
            }
            if (chunk < chunks) add_chunk(chunk_ids, counts[chunk]);
            else if (chunks != 0 || !chunk_ids.empty()) throw std::invalid_argument("one count per chunk");
            chunk++;
            chunk_ids.clear();
        }
        if (symbol != SEPARATOR) throw std::invalid_argument("the symbols must start and end with a separator");
        // no chunks: the layout of _train_pairs is then two separators
        if (chunk != chunks && chunks != 0) throw std::invalid_argument("one count per chunk");
    }

    void add_node(uint32_t symbol, uint32_t chunk) {
        const uint32_t p = static_cast<uint32_t>(nodes_.size());
        nodes_.push_back(Node{symbol, p + 1, p == 0 ? 0 : p - 1, chunk});
    }

    // Lays out one chunk and its separator; a chunk of one symbol holds no pair and is left out.
    void add_chunk(const std::vector<uint32_t> &ids, int64_t count) {
        if (ids.size() < 2) return;
        if (count < 0) throw std::invalid_argument("a chunk count is negative");
        if (nodes_.size() + ids.size() + 1 >= DEAD) throw std::length_error("too many symbols for the native merge loop");
        for (const uint32_t id : ids) add_node(id, static_cast<uint32_t>(weights_.size()));
        weights_.push_back(count);
        add_node(SEP, 0);
    }

    int64_t weight(uint32_t p) const { return weights_[nodes_[p].chunk]; }

    void count_initial_pairs() {
        std::vector<uint32_t> occurrences;  // per pair: how many positions (to size its list once)
        const size_t size = nodes_.size();
        for (size_t p = 0; p + 1 < size; p++) {
            const uint32_t a = nodes_[p].sym, b = nodes_[p + 1].sym;
            if (a == SEP || b == SEP || !allowed(a, b)) continue;
            const uint64_t key = pack(a, b);
            uint32_t at = index_.find(key);
            if (at == PairIndex::MISSING) {
                at = static_cast<uint32_t>(pairs_.size());
                index_.insert(key, at);
                pairs_.push_back(Pair{key, 0, {}});
                occurrences.push_back(0);
            }
            pairs_[at].count += weight(static_cast<uint32_t>(p));
            occurrences[at]++;
        }
        for (size_t at = 0; at < pairs_.size(); at++) {
            if (pairs_[at].count >= min_frequency_) {
                pairs_[at].positions.reserve(occurrences[at]);
                heap_.push_back(Entry{pairs_[at].count, pairs_[at].key, static_cast<uint32_t>(at)});
            } else {
                pairs_[at].count = GONE;
            }
        }
        std::vector<uint32_t>().swap(occurrences);
        for (size_t p = 0; p + 1 < size; p++) {
            const uint32_t a = nodes_[p].sym, b = nodes_[p + 1].sym;
            if (a == SEP || b == SEP || !allowed(a, b)) continue;
            Pair &pair = pairs_[index_.find(pack(a, b))];
            if (pair.count != GONE) pair.positions.push_back(static_cast<uint32_t>(p));
        }
        std::make_heap(heap_.begin(), heap_.end(), heap_order);
    }

    // The tracked pair with the highest current count (smallest pair on ties), refreshing stale entries.
    uint32_t pop_best() {
        while (!heap_.empty()) {
            std::pop_heap(heap_.begin(), heap_.end(), heap_order);
            const Entry entry = heap_.back();
            heap_.pop_back();
            const int64_t current = pairs_[entry.pair].count;
            if (current == entry.count) return entry.pair;
            if (current != GONE) push(entry.pair);
        }
        return PairIndex::MISSING;
    }

    void push(uint32_t pair) {
        heap_.push_back(Entry{pairs_[pair].count, pairs_[pair].key, pair});
        std::push_heap(heap_.begin(), heap_.end(), heap_order);
    }

    // Replaces every occurrence of pair `merged` by `made`, left to right, and updates the counts of the
    // pairs around each occurrence.
    void merge_pair(uint32_t merged, uint32_t made) {
        const uint64_t key = pairs_[merged].key;
        const uint32_t left = static_cast<uint32_t>(key >> 32), right = static_cast<uint32_t>(key);
        std::vector<uint32_t> positions;
        positions.swap(pairs_[merged].positions);
        pairs_[merged].count = GONE;  // every occurrence is merged
        before_.clear();
        after_.clear();
        for (const uint32_t p : positions) {
            const uint32_t q = nodes_[p].nxt;
            if (nodes_[p].sym != left || nodes_[q].sym != right) continue;  // taken apart by an earlier merge
            const uint32_t r = nodes_[q].nxt;
            nodes_[p].sym = made;
            nodes_[q].sym = DEAD;
            nodes_[p].nxt = r;
            nodes_[r].prv = p;
            const int64_t w = weight(p);
            const uint32_t x_at = nodes_[p].prv, x = nodes_[x_at].sym;
            if (x != SEP) before_.push_back(Event{x, x_at, w});
            const uint32_t y = nodes_[r].sym;
            if (y != SEP && !(y == left && nodes_[nodes_[r].nxt].sym == right)) after_.push_back(Event{y, p, w});
        }
        // Left of an occurrence (x, left) becomes (x, made); x is made itself where two occurrences touch,
        // and the old pair was (right, left). Right of it (right, y) becomes (made, y).
        record(before_, [&](uint32_t x) { return pack(x, made); }, [&](uint32_t x) { return pack(x == made ? right : x, left); });
        record(after_, [&](uint32_t y) { return pack(made, y); }, [&](uint32_t y) { return pack(right, y); });
    }

    // Per distinct neighbour: the born pair (its summed weight and positions, ascending) and the drop of the
    // old pair it replaces. Events are grouped in linear time through group_of_ (neighbour -> its group, by
    // ID), and each group keeps its events' order, which is ascending by position.
    template <typename Born, typename Old>
    void record(const std::vector<Event> &events, Born born_key, Old old_key) {
        groups_.clear();
        for (const Event &event : events) {
            if (event.neighbour >= group_of_.size()) group_of_.resize(std::max<size_t>(next_id_, event.neighbour + 1), NONE);
            uint32_t &group = group_of_[event.neighbour];
            if (group == NONE) {
                group = static_cast<uint32_t>(groups_.size());
                groups_.push_back(Group{event.neighbour, 0, 0, 0, 0});
            }
            groups_[group].total += event.weight;
            groups_[group].size++;
        }
        size_t start = 0;
        for (Group &group : groups_) {
            group.start = start;
            start += group.size;
        }
        grouped_.resize(events.size());
        for (const Event &event : events) {
            Group &group = groups_[group_of_[event.neighbour]];
            grouped_[group.start + group.filled++] = event.position;
        }
        for (const Group &group : groups_) {
            group_of_[group.neighbour] = NONE;
            drop(old_key(group.neighbour), group.total);
            const uint64_t key = born_key(group.neighbour);
            if (group.total < min_frequency_ || !allowed(static_cast<uint32_t>(key >> 32), static_cast<uint32_t>(key)))
                continue;
            const uint32_t at = static_cast<uint32_t>(pairs_.size());
            if (at == PairIndex::MISSING) throw std::length_error("too many pairs for the native merge loop");
            pairs_.push_back(Pair{key, group.total, std::vector<uint32_t>(grouped_.begin() + group.start,
                                                                          grouped_.begin() + group.start + group.size)});
            index_.insert(key, at);
            push(at);
        }
    }

    // An old pair occurs weight times less: counts never grow, so one below min_frequency goes for good.
    void drop(uint64_t key, int64_t weight) {
        const uint32_t at = index_.find(key);
        if (at == PairIndex::MISSING || pairs_[at].count == GONE) return;
        Pair &pair = pairs_[at];
        pair.count -= weight;
        if (pair.count < min_frequency_) {
            pair.count = GONE;
            std::vector<uint32_t>().swap(pair.positions);
        }
    }

    struct Node {  // one position: its symbol, its live neighbours, its chunk (one cache line holds four)
        uint32_t sym, nxt, prv, chunk;
    };
    std::vector<Node> nodes_;
    std::vector<int64_t> weights_;  // per kept chunk: its count
    std::vector<Pair> pairs_;
    PairIndex index_;
    std::vector<Entry> heap_;
    std::vector<Event> before_, after_;
    struct Group {  // the events of one neighbour: where they go in grouped_, how many, their summed weight
        uint32_t neighbour;
        size_t start, size;
        int64_t total;
        size_t filled;
    };
    static constexpr uint32_t NONE = UINT32_MAX;
    std::vector<uint32_t> group_of_;  // neighbour ID -> its group in groups_, NONE between merges
    std::vector<Group> groups_;
    std::vector<uint32_t> grouped_;  // the events' positions, group after group
    uint32_t next_id_;
    int64_t min_frequency_, forbidden_;
};

}  // namespace lmprep_native
