// The native encoder's pass over a batch of texts: split, chunk cache, merges of the misses, and the
// threads of one call. Part of the native tokenizer core (_native.cpp includes it); no Python API here.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>
#include <vector>

#include "_native_bpe.h"
#include "_native_cache.h"
#include "_native_split.h"
#include "_native_threads.h"

namespace lmprep_native {

// An encoder apart from Python: plain members, so that a Python object holding one starts zeroed.
struct EncoderCore {
    const MergeTable *table;                        // the merges (owned by the Python object)
    int mode;
    bool bytes_unit;                                // byte kind: base IDs per UTF-8 byte; else per character
    uint32_t byte_ids[256];                         // byte kind: byte -> base ID
    std::unordered_map<uint32_t, uint32_t> *chars;  // char kind: code point -> base ID
    uint32_t unknown;                               // char kind: the ID of a character not in the alphabet
    ChunkCache *cache;
    std::shared_mutex *lock;  // shared to read the cache, exclusive to add to it; taken without the GIL
};

constexpr size_t BATCH = 32;  // chunks whose keys are made, and slots asked for, before the first lookup

// What one encoding pass (one thread's share of a call) needs besides the encoder: reusable buffers, the
// chunks it merged that the encoder's cache did not hold, and where a text failed.
struct Pass {
    Splitter splitter;
    std::vector<size_t> ends;
    std::vector<char> keys;  // the UTF-8 of a batch's chunks (not for ASCII text); grows, never shrinks
    std::vector<uint32_t> ids;
    ChunkCache fresh;             // the pass's new chunks, looked up after the cache; added to it at the end
    bool alone = false;           // the pass holds the cache alone: its new chunks go straight into it
    ptrdiff_t surrogate_at = -1;  // byte kind: the position of a lone surrogate, which UTF-8 cannot hold
};

// Add the new chunks of finished passes to the encoder's cache, under the exclusive lock (taken once per
// call or round, after every thread of it has let go of the shared one): each of the cache's tables by one
// of `threads` threads, the calling one among them. A table that runs out of memory starts over.
inline void add_new_chunks(EncoderCore *self, const std::vector<ChunkCache *> &passes, size_t threads) {
    std::unique_lock<std::shared_mutex> hold(*self->lock);
    const size_t workers = std::min(threads, ChunkCache::SHARDS);
    run_ranges(workers, [&](size_t t) {
        for (size_t s = t; s < ChunkCache::SHARDS; s += workers)
            for (ChunkCache *fresh : passes) absorb(self->cache->shard(s), fresh->shard(s));
    });
}

// A chunk's key: its code points as UTF-8 (in place for ASCII text, else in one of the pass's buffers),
// with its prefix and hash when the cache may hold it.
struct ChunkKey : Key {
    bool cacheable;
};

constexpr size_t KEY_MARGIN = 8;  // bytes before the keys written into a buffer: prefix_after may read them

// The keys of `count` consecutive chunks, from s[start] to s[ends[count - 1]], into keys, their slots asked
// for: in place for ASCII text, else written into pass.keys. False (with pass.surrogate_at) if the byte kind
// meets a lone surrogate.
template <typename T>
bool batch_keys(const EncoderCore *self, const T *s, size_t start, const size_t *ends, size_t count, bool ascii,
                Pass &pass, ChunkKey *keys) {
    const char *readable = reinterpret_cast<const char *>(s);
    char *at = nullptr;
    if (!ascii) {
        const size_t bytes = KEY_MARGIN + 4 * (ends[count - 1] - start);
        if (pass.keys.size() < bytes) pass.keys.resize(bytes);
        readable = pass.keys.data();
        at = pass.keys.data() + KEY_MARGIN;
    }
    for (size_t k = 0; k < count; k++) {
        ChunkKey &key = keys[k];
        const size_t end = ends[k];
        key.cacheable = end - start <= CACHE_MAX_CHUNK;
        if (ascii) {
            key.data = readable + start;
            key.length = end - start;
        } else {
            key.data = at;
            for (size_t i = start; i < end; i++) {
                if (sizeof(T) > 1 && self->bytes_unit && is_surrogate(s[i])) {
                    pass.surrogate_at = static_cast<ptrdiff_t>(i);
                    return false;
                }
                at = write_utf8(at, s[i]);
            }
            key.length = static_cast<size_t>(at - key.data);
        }
        if (key.cacheable) {
            key.prefix = prefix_after(readable, key.data, key.length);
            key.hash = hash_key(key.prefix, key.data, key.length);
            self->cache->prefetch(key.hash);
            if (!pass.alone) pass.fresh.prefetch(key.hash);
        }
        start = end;
    }
    return true;
}

// The base IDs of chunk s[start..end) (whose key is key) into pass.ids.
template <typename T>
void base_ids(const EncoderCore *self, const T *s, size_t start, size_t end, const ChunkKey &key, Pass &pass) {
    pass.ids.clear();
    if (self->bytes_unit) {
        pass.ids.resize(key.length);
        for (size_t b = 0; b < key.length; b++) pass.ids[b] = self->byte_ids[static_cast<unsigned char>(key.data[b])];
    } else {
        for (size_t i = start; i < end; i++) {
            const auto id = self->chars->find(s[i]);
            pass.ids.push_back(id == self->chars->end() ? self->unknown : id->second);
        }
    }
}

inline void append_ids(std::vector<uint32_t> &out, const uint32_t *ids, size_t length) {
    if (length == 1) {  // most chunks
        out.push_back(ids[0]);
        return;
    }
    out.insert(out.end(), ids, ids + length);
}

// The IDs of one chunk appended to out: from the cache, from the pass's new chunks, or merged (and kept
// among the pass's new chunks).
template <typename T>
void encode_chunk(EncoderCore *self, const T *s, size_t start, size_t end, const ChunkKey &key, Pass &pass,
                  std::vector<uint32_t> &out) {
    size_t length;
    const uint32_t *found = nullptr;
    if (key.cacheable) {
        found = self->cache->find(key, &length);
        if (!found && !pass.alone) found = pass.fresh.find(key, &length);
    }
    if (found) {
        append_ids(out, found, length);
        return;
    }
    base_ids(self, s, start, end, key, pass);
    const size_t merged = apply_merges(pass.ids.data(), pass.ids.size(), *self->table);
    append_ids(out, pass.ids.data(), merged);
    if (key.cacheable) (pass.alone ? *self->cache : pass.fresh).insert(key, pass.ids.data(), merged);
}

// Whether data[0..n) is UTF-8 (then a chunk's key may be spelt so).
inline bool is_utf8(const char *data, size_t n) {
    for (size_t i = 0; i < n;) {
        const auto byte = [&](size_t k) { return static_cast<unsigned char>(data[k]); };
        const unsigned char lead = byte(i);
        const size_t length = lead < 0x80 ? 1 : lead >= 0xC2 && lead < 0xE0 ? 2 : lead >= 0xE0 && lead < 0xF0 ? 3
                              : lead >= 0xF0 && lead < 0xF5 ? 4 : 0;
        if (length == 0 || i + length > n) return false;
        for (size_t k = 1; k < length; k++)
            if ((byte(i + k) & 0xC0) != 0x80) return false;
        const uint32_t second = length > 1 ? byte(i + 1) : 0x80;
        if ((lead == 0xE0 && second < 0xA0) || (lead == 0xF0 && second < 0x90) || (lead == 0xF4 && second >= 0x90))
            return false;  // overlong, or past U+10FFFF
        i += length;
    }
    return true;
}

// The cache's first entries: the text of each token a merge makes, with the IDs that encoding that text
// gives (the token itself for every tokenizer lmprep trains; whatever the merges make for any other). A
// chunk that is one token, the most common kind, is then found from the first call on, and a cold cache
// merges only the chunks that no token spells. merges[r] = (left, right) made results[r]. Tokenizers whose
// IDs are far sparser than their merges (none lmprep writes) are not seeded.
inline void seed_cache(EncoderCore *self, const std::vector<std::pair<uint32_t, uint32_t>> &merges,
                       const std::vector<uint32_t> &results) {
    std::vector<std::pair<uint32_t, uint32_t>> units;  // (unit, base ID): a byte or a character
    if (self->bytes_unit) {
        for (uint32_t b = 0; b < 256; b++) units.emplace_back(b, self->byte_ids[b]);
    } else {
        for (const auto &[c, id] : *self->chars) units.emplace_back(c, id);
    }
    uint32_t top = 0;
    for (const auto &unit : units) top = std::max(top, unit.second);
    for (const uint32_t made : results) top = std::max(top, made);
    if (top > 4 * (merges.size() + units.size()) + 1024) return;
    std::vector<std::vector<uint32_t>> text(size_t{top} + 1);  // each token's units
    for (const auto &[unit, id] : units) text[id] = {unit};
    std::vector<char> key;
    std::vector<uint32_t> ids;
    for (size_t r = 0; r < merges.size(); r++) {
        const auto [left, right] = merges[r];
        if (left > top || right > top || text[left].empty() || text[right].empty()) continue;
        std::vector<uint32_t> &units_of = text[results[r]];
        if (!units_of.empty()) continue;  // a token made twice keeps its first text
        units_of = text[left];
        units_of.insert(units_of.end(), text[right].begin(), text[right].end());
        if (units_of.size() > CACHE_MAX_CHUNK) continue;
        key.assign(4 * units_of.size(), 0);
        char *end = key.data();
        for (const uint32_t unit : units_of) end = self->bytes_unit ? (*end = static_cast<char>(unit), end + 1)
                                                                     : write_utf8(end, unit);
        const size_t length = static_cast<size_t>(end - key.data());
        if (self->bytes_unit && !is_utf8(key.data(), length)) continue;
        ids.clear();
        for (const uint32_t unit : units_of) {
            if (self->bytes_unit) {
                ids.push_back(self->byte_ids[unit]);
            } else {
                const auto id = self->chars->find(unit);
                ids.push_back(id == self->chars->end() ? self->unknown : id->second);
            }
        }
        const Key seed{key.data(), length, prefix_of(key.data(), length), 0};
        const Key hashed{seed.data, seed.length, seed.prefix, hash_key(seed.prefix, seed.data, seed.length)};
        self->cache->insert(hashed, ids.data(), apply_merges(ids.data(), ids.size(), *self->table));
    }
}

// Encode the code units s[0..n) of one text, appending its IDs to out; false (with pass.surrogate_at) if
// the byte kind meets a lone surrogate. The caller holds the cache's lock. On text that repeats little the
// lookups wait on memory, so the chunks go in batches: the keys of a batch are hashed and their slots asked
// for, then looked up, by which time the first slots have come.
template <typename T>
bool encode_units(EncoderCore *self, const T *s, size_t n, bool ascii, Pass &pass, std::vector<uint32_t> &out) {
    pass.ends.clear();
    pass.splitter.split(s, n, self->mode, pass.ends);
    const size_t chunks = pass.ends.size();
    ChunkKey keys[BATCH];
    size_t start = 0;
    for (size_t first = 0; first < chunks; first += BATCH) {
        const size_t *ends = pass.ends.data() + first;
        const size_t count = std::min(BATCH, chunks - first);
        if (!batch_keys(self, s, start, ends, count, ascii, pass, keys)) return false;
        for (size_t k = 0; k < count; k++) {
            encode_chunk(self, s, start, ends[k], keys[k], pass, out);
            start = ends[k];
        }
    }
    return true;
}

inline bool encode_text(EncoderCore *self, const TextView &text, Pass &pass, std::vector<uint32_t> &out) {
    return text.visit([&](const auto *s, bool ascii) { return encode_units(self, s, text.length, ascii, pass, out); });
}

// How encoding some texts went wrong, if it did: the first text the byte kind refused (and where in it), or
// memory that could not be had.
struct Trouble {
    ptrdiff_t failed = -1;        // the index of the text among the call's
    ptrdiff_t surrogate_at = -1;  // where in it
    bool out_of_memory = false;
    bool any() const { return failed >= 0 || out_of_memory; }
};

// The IDs of some consecutive texts, one after another, and where each text's end among them.
struct Piece : Trouble {
    std::vector<uint32_t> ids;
    std::vector<int64_t> ends;
};

// What encoding a call's texts gave: their IDs in pieces of consecutive texts, in order, each the one
// thread's that encoded it, so that no thread waits to append its IDs to another's; they are copied once,
// into what the call returns. Read only without trouble.
struct Encoded : Trouble {
    std::vector<Piece> pieces;

    size_t id_count() const {
        size_t count = 0;
        for (const Piece &piece : pieces) count += piece.ids.size();
        return count;
    }
    size_t text_count() const {
        size_t count = 0;
        for (const Piece &piece : pieces) count += piece.ends.size();
        return count;
    }
    // visit(ids, length) for each text, in order.
    template <typename Visit>
    void each_text(Visit &&visit) const {
        for (const Piece &piece : pieces) {
            int64_t start = 0;
            for (const int64_t end : piece.ends) {
                visit(piece.ids.data() + start, static_cast<size_t>(end - start));
                start = end;
            }
        }
    }
    // Every ID into `into` (room for id_count()), the pieces shared among up to `threads` threads.
    void copy_ids(uint32_t *into, size_t threads) const {
        std::vector<size_t> starts{0};  // where each piece's IDs go
        for (const Piece &piece : pieces) starts.push_back(starts.back() + piece.ids.size());
        threads = std::max<size_t>(1, std::min(threads, pieces.size()));
        run_ranges(threads, [&](size_t t) {
            for (size_t p = t; p < pieces.size(); p += threads)
                std::copy(pieces[p].ids.begin(), pieces[p].ids.end(), into + starts[p]);
        });
    }
    // The text_count() + 1 offsets where each text's IDs start (and the last ends) into `into`.
    void copy_offsets(int64_t *into) const {
        int64_t shift = 0;
        *into++ = 0;
        for (const Piece &piece : pieces) {
            for (const int64_t end : piece.ends) *into++ = shift + end;
            shift += static_cast<int64_t>(piece.ids.size());
        }
    }
    // This call's trouble: the first piece's that had any (the pieces after it are not read).
    void gather_trouble(size_t from) {
        for (size_t p = from; p < pieces.size() && !any(); p++)
            if (pieces[p].any()) static_cast<Trouble &>(*this) = pieces[p];
    }
};

// Room in piece for the IDs of views[begin..end) at one per code point (a text's IDs are seldom more), so
// that they are not copied as the buffer grows: memory that stays unused is only address space. A bound that
// cannot be had is no error: the buffer grows as it must.
inline void reserve_room(const std::vector<TextView> &views, size_t begin, size_t end, Piece &piece) {
    size_t units = 0;
    for (size_t i = begin; i < end; i++) units += views[i].length;
    try {
        piece.ids.reserve(units);
        piece.ends.reserve(end - begin);
    } catch (const std::bad_alloc &) {
    }
}

// Encode views[begin..end) into piece: under the cache's shared lock, the new chunks kept in pass.fresh
// (bounded to a `sharing` share of the cache's bound); or, pass.alone, under the exclusive lock the caller
// holds, into the cache. Runs without the GIL; never throws (run_ranges relies on it).
inline void encode_piece(EncoderCore *self, const std::vector<TextView> &views, size_t begin, size_t end,
                         size_t sharing, Pass &pass, Piece &piece) {
    try {
        std::shared_lock<std::shared_mutex> hold(*self->lock, std::defer_lock);
        if (!pass.alone) hold.lock();
        pass.fresh.bound(self->cache->max_bytes() / sharing);
        reserve_room(views, begin, end, piece);
        for (size_t i = begin; i < end; i++) {
            if (!encode_text(self, views[i], pass, piece.ids)) {
                piece.failed = static_cast<ptrdiff_t>(i);
                piece.surrogate_at = pass.surrogate_at;
                return;
            }
            piece.ends.push_back(static_cast<int64_t>(piece.ids.size()));
        }
    } catch (...) {  // bad_alloc, or system_error from the lock
        piece.out_of_memory = true;
    }
}

constexpr size_t BLOCK_CHARACTERS = 1 << 16;  // about the size of a piece in a round

// Encode views[begin..end) into out with passes.size() threads, which take pieces of about BLOCK_CHARACTERS
// in turn as they come free (a piece needs merging as much as its chunks are new, which its length does not
// tell), then add their new chunks to the cache. A thread stops taking pieces past one that had trouble.
inline void encode_round(EncoderCore *self, const std::vector<TextView> &views, size_t begin, size_t end,
                         std::vector<Pass> &passes, Encoded &out) {
    const size_t threads = passes.size();
    size_t characters = 0;
    for (size_t i = begin; i < end; i++) characters += views[i].length + 1;
    const size_t wanted = std::max(threads, characters / BLOCK_CHARACTERS);
    const std::vector<size_t> bounds = balanced_bounds(views.data() + begin, end - begin, wanted);
    const size_t first = out.pieces.size(), blocks = bounds.size() - 1;
    out.pieces.resize(first + blocks);
    std::atomic<size_t> next{0}, stop{blocks};  // the next piece to take; a piece that had trouble
    run_ranges(threads, [&](size_t t) {
        for (size_t b = next++; b < stop.load(); b = next++) {
            Piece &piece = out.pieces[first + b];
            encode_piece(self, views, begin + bounds[b], begin + bounds[b + 1], threads, passes[t], piece);
            for (size_t seen = stop.load(); piece.any() && b < seen && !stop.compare_exchange_weak(seen, b);) {
            }
        }
    });
    std::vector<ChunkCache *> fresh;
    for (Pass &pass : passes) fresh.push_back(&pass.fresh);
    add_new_chunks(self, fresh, threads);
    out.gather_trouble(first);
}

constexpr size_t ROUND_MIN_TEXTS = 64, ROUND_MIN_CHARACTERS = 1 << 20;  // per thread, for a call to have rounds

// Where the rounds of a call with threads start (and the last ends): after 1/32, 1/16, ... 1/2 of the
// characters. Within a round, a chunk the cache lacks is merged by every thread that meets it; the most
// common chunks come in the first, short rounds, and each round's new chunks join the cache before the
// next, so the threads repeat little of each other's work. A small call is one round.
inline std::vector<size_t> round_bounds(const std::vector<TextView> &views, size_t threads) {
    size_t total = 0;
    for (const TextView &text : views) total += text.length + 1;
    std::vector<size_t> bounds{0};
    if (views.size() < ROUND_MIN_TEXTS * threads || total < ROUND_MIN_CHARACTERS * threads) return {0, views.size()};
    size_t seen = 0, share = 32;
    for (size_t i = 0; i < views.size() && share > 1; i++) {
        seen += views[i].length + 1;
        if (seen * share >= total) {
            bounds.push_back(i + 1);
            while (share > 1 && seen * share >= total) share /= 2;
        }
    }
    if (bounds.back() != views.size()) bounds.push_back(views.size());
    return bounds;
}

// Encode all views into out in this thread, as one piece: with the cache held alone if no other call is
// using it (one lookup per chunk, new chunks added at once), else beside the others.
inline void encode_alone(EncoderCore *self, const std::vector<TextView> &views, Encoded &out) {
    std::unique_lock<std::shared_mutex> hold(*self->lock, std::try_to_lock);
    Pass pass;
    pass.alone = hold.owns_lock();
    out.pieces.resize(1);
    encode_piece(self, views, 0, views.size(), 1, pass, out.pieces[0]);
    out.gather_trouble(0);
    if (pass.alone && out.out_of_memory) self->cache->clear();  // out of memory: the cache starts over
    if (hold.owns_lock()) hold.unlock();
    else add_new_chunks(self, {&pass.fresh}, 1);
}

// Encode all views into out with up to `threads` threads (the calling one among them), in rounds; the
// result is the same whatever the number. Runs without the GIL; never throws.
inline void encode_all(EncoderCore *self, const std::vector<TextView> &views, size_t threads, Encoded &out) {
    threads = std::max<size_t>(1, std::min(threads, views.size()));
    try {
        if (threads == 1) {
            encode_alone(self, views, out);
            return;
        }
        std::vector<Pass> passes(threads);
        const std::vector<size_t> rounds = round_bounds(views, threads);
        for (size_t r = 0; r + 1 < rounds.size() && !out.any(); r++)
            encode_round(self, views, rounds[r], rounds[r + 1], passes, out);
    } catch (const std::bad_alloc &) {
        out.out_of_memory = true;
    }
}

}  // namespace lmprep_native
