// The hand-written pre-tokenizers of the gpt4, gpt2 and word patterns, over code units of any width.
// Part of the native tokenizer core (_native.cpp includes it); no Python API here.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstddef>
#include <string>
#include <unordered_map>
#include <vector>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include "_unicode_tables.h"

namespace lmprep_native {

// ---- character classes (from _unicode_tables.h, generated from the regex module) ----------------------

// A character's class byte: LETTER, NUMBER and SPACE as the tables say, NEWLINE for \r and \n, OTHER for
// [^\s\p{L}\p{N}] (none of the three), and the two characters the patterns name: the space and '.
enum : uint8_t { LETTER = 1, NUMBER = 2, SPACE = 4, NEWLINE = 8, OTHER = 16, BLANK = 32, APOSTROPHE = 64 };
constexpr uint32_t CODE_POINTS = 0x110000;
constexpr int BLOCK_BITS = 8;
constexpr uint32_t BLOCK = 1u << BLOCK_BITS;

inline uint16_t block_of[CODE_POINTS >> BLOCK_BITS];  // code point >> 8 -> index of its block of classes
inline std::vector<uint8_t> blocks;                  // distinct blocks of 256 classes, one after another
constexpr uint32_t BMP = 0x10000;
inline uint8_t bmp_class_bytes[BMP];  // the class bytes of the Basic Multilingual Plane, one load each (64 KB)

inline void build_class_table() {
    std::vector<uint8_t> classes(CODE_POINTS, 0);
    auto mark = [&](const uint32_t (*ranges)[2], int count, uint8_t bit) {
        for (int i = 0; i < count; i++)
            for (uint32_t c = ranges[i][0]; c <= ranges[i][1]; c++) classes[c] |= bit;
    };
    mark(LETTER_RANGES, LETTER_RANGE_COUNT, LETTER);
    mark(NUMBER_RANGES, NUMBER_RANGE_COUNT, NUMBER);
    mark(SPACE_RANGES, SPACE_RANGE_COUNT, SPACE);
    std::unordered_map<std::string, uint16_t> seen;
    for (uint32_t b = 0; b < (CODE_POINTS >> BLOCK_BITS); b++) {
        std::string key(reinterpret_cast<const char *>(&classes[b << BLOCK_BITS]), BLOCK);
        auto found = seen.find(key);
        if (found == seen.end()) {
            found = seen.emplace(key, static_cast<uint16_t>(blocks.size() / BLOCK)).first;
            blocks.insert(blocks.end(), key.begin(), key.end());
        }
        block_of[b] = found->second;
    }
    for (uint32_t c = 0; c < BMP; c++)
        bmp_class_bytes[c] = static_cast<uint8_t>(classes[c] | (c == '\r' || c == '\n' ? NEWLINE : 0) |
                                                  (classes[c] == 0 ? OTHER : 0) | (c == ' ' ? BLANK : 0) |
                                                  (c == '\'' ? APOSTROPHE : 0));
}

inline uint8_t class_of(uint32_t c) {
    if (c < BMP) return bmp_class_bytes[c] & (LETTER | NUMBER | SPACE);
    if (c >= CODE_POINTS) return 0;
    return blocks[(static_cast<size_t>(block_of[c >> BLOCK_BITS]) << BLOCK_BITS) | (c & (BLOCK - 1))];
}

inline bool folds_to(uint32_t c, const uint32_t *folded) {
    for (; *folded; folded++)
        if (*folded == c) return true;
    return false;
}

// The split modes, defined here once: Python reads them by name from _native.SPLIT_MODES.
enum Mode : int { GPT4 = 0, GPT2 = 1, WORD = 2, WHOLE = 3 };  // WHOLE: no pre-split (pattern none)

struct ModeName {
    const char *name;  // as patterns.py names the pattern
    Mode mode;
};
constexpr ModeName MODE_NAMES[] = {{"gpt4", GPT4}, {"gpt2", GPT2}, {"word", WORD}, {"none", WHOLE}};

inline bool valid_mode(int mode) { return mode >= GPT4 && mode <= WHOLE; }

// ---- the pre-tokenizers: where each chunk ends, exactly as regex's findall cuts ----------------------
//
// A scalar loop over the characters of a chunk mispredicts where each run of letters, digits or spaces
// ends, once a chunk, which costs more than the rest of the split on text whose chunks are a few
// characters long. So the split first turns the text into bit masks, 64 characters a word, one mask per
// class (letter, number, space, newline, other, and the space and apostrophe the patterns name). The gpt4
// split computes every chunk start from the masks (gpt4_split); the gpt2 and word splits find where each
// run ends with one count of trailing zeros, leaving only the choice between alternatives to branches.

// The class byte of a code unit.
template <typename T>
inline uint8_t class_byte_of(T c) {
    if (sizeof(T) <= 2 || c < BMP) return bmp_class_bytes[c];
    const uint8_t k = class_of(c);
    return static_cast<uint8_t>(k ? k : OTHER);  // no newline lies past the BMP
}

// The masks of 64 consecutive characters: bit k of a mask is character k's class. Past the text's end
// every bit is clear, so that a run always ends there.
struct ClassWord {
    uint64_t letter, number, space, newline, other, blank, apostrophe, not_space;
};

// Pack the class bytes of 64 characters into their masks.
inline ClassWord pack_classes(const uint8_t (&classes)[64]) {
    ClassWord word{};
#if defined(__SSE2__)
    for (int part = 0; part < 4; part++) {
        const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i *>(classes + 16 * part));
        const auto bit = [&](int shift) {  // each byte's class bit (7 - shift) moved to its top, then gathered
            return uint64_t{static_cast<uint16_t>(_mm_movemask_epi8(_mm_slli_epi16(v, shift)))} << (16 * part);
        };
        word.letter |= bit(7);
        word.number |= bit(6);
        word.space |= bit(5);
        word.newline |= bit(4);
        word.other |= bit(3);
        word.blank |= bit(2);
        word.apostrophe |= bit(1);
    }
    word.not_space = word.letter | word.number | word.other;  // past the end, not in it either
#else
    for (int k = 0; k < 64; k++) {
        const uint64_t one = uint64_t{1} << k;
        const uint8_t c = classes[k];
        if (c & LETTER) word.letter |= one;
        if (c & NUMBER) word.number |= one;
        if (c & SPACE) word.space |= one;
        if (c & NEWLINE) word.newline |= one;
        if (c & OTHER) word.other |= one;
        if (c & BLANK) word.blank |= one;
        if (c & APOSTROPHE) word.apostrophe |= one;
        if (c && !(c & SPACE)) word.not_space |= one;
    }
#endif
    return word;
}

#if defined(__SSE2__)
// The masks of 64 characters of one byte each, if all are ASCII (else false), from comparisons of the
// bytes themselves rather than a table load each: the classes regex gives ASCII (tests check every one).
inline bool classify_ascii(const uint8_t *s, ClassWord &word) {
    __m128i v[4];
    for (int part = 0; part < 4; part++) v[part] = _mm_loadu_si128(reinterpret_cast<const __m128i *>(s + 16 * part));
    if (_mm_movemask_epi8(_mm_or_si128(_mm_or_si128(v[0], v[1]), _mm_or_si128(v[2], v[3])))) return false;
    const auto in = [](__m128i x, char low, char high) {  // low <= x <= high, bytes below 128
        return _mm_and_si128(_mm_cmpgt_epi8(x, _mm_set1_epi8(static_cast<char>(low - 1))),
                             _mm_cmplt_epi8(x, _mm_set1_epi8(static_cast<char>(high + 1))));
    };
    const auto is = [](__m128i x, char c) { return _mm_cmpeq_epi8(x, _mm_set1_epi8(c)); };
    word = ClassWord{};
    for (int part = 0; part < 4; part++) {
        const auto bits = [&](__m128i m) { return uint64_t{static_cast<uint16_t>(_mm_movemask_epi8(m))} << (16 * part); };
        const __m128i x = v[part];
        const __m128i letter = in(_mm_or_si128(x, _mm_set1_epi8(0x20)), 'a', 'z');  // either case
        const __m128i number = in(x, '0', '9');
        const __m128i blank = is(x, ' ');
        const __m128i space = _mm_or_si128(in(x, '\t', '\r'), blank);
        word.letter |= bits(letter);
        word.number |= bits(number);
        word.space |= bits(space);
        word.newline |= bits(_mm_or_si128(is(x, '\n'), is(x, '\r')));
        word.other |= bits(_mm_cmpeq_epi8(_mm_or_si128(_mm_or_si128(letter, number), space), _mm_setzero_si128()));
        word.blank |= bits(blank);
        word.apostrophe |= bits(is(x, '\''));
    }
    word.not_space = word.letter | word.number | word.other;
    return true;
}
#endif

// The split of one text after another: its masks (kept between texts, never shrunk) and the cut.
class Splitter {
  public:
    // Appends to ends where each chunk of s[0..n) ends, in the given mode.
    template <typename T>
    void split(const T *s, size_t n, int mode, std::vector<size_t> &ends) {
        if (mode == WHOLE) {
            if (n) ends.push_back(n);
            return;
        }
        if (n == 0) return;
        classify(s, n);
        if (mode == GPT4) {
            gpt4_split(s, n, ends);
            return;
        }
        size_t i = 0;
        while (i < n) {
            i = mode == GPT2 ? gpt2_end(s, i, n) : word_end(i);
            ends.push_back(i);
        }
    }

  private:
    using Mask = uint64_t ClassWord::*;

    template <typename T>
    void classify(const T *s, size_t n) {
        words_.resize(n / 64 + 1);  // one word more than the characters fill: the end is a clear bit
        uint8_t classes[64];
        for (size_t w = 0; w < words_.size(); w++) {
            const size_t first = 64 * w, count = std::min<size_t>(64, n - std::min(n, first));
#if defined(__SSE2__)
            if constexpr (sizeof(T) == 1)
                if (count == 64 && classify_ascii(reinterpret_cast<const uint8_t *>(s + first), words_[w])) continue;
#endif
            for (size_t k = 0; k < count; k++) classes[k] = class_byte_of(s[first + k]);
            std::fill(classes + count, classes + 64, uint8_t{0});
            words_[w] = pack_classes(classes);
        }
    }

    bool is(Mask mask, size_t i) const { return (words_[i >> 6].*mask >> (i & 63)) & 1; }

    // The first position from i on whose character is not of the mask's class (the text's end at most).
    size_t run_end(Mask mask, size_t i) const {
        size_t w = i >> 6;
        uint64_t outside = ~(words_[w].*mask) >> (i & 63);
        if (outside) return i + static_cast<size_t>(__builtin_ctzll(outside));
        while (!(outside = ~(words_[++w].*mask))) {}
        return 64 * w + static_cast<size_t>(__builtin_ctzll(outside));
    }
    // One past the last newline in [i, j), or i if there is none.
    size_t after_last_newline(size_t i, size_t j) const {
        for (size_t w = (j - 1) >> 6;; w--) {
            uint64_t lines = words_[w].newline;
            const size_t first = 64 * w;
            if (j - first < 64) lines &= (uint64_t{1} << (j - first)) - 1;  // below j
            if (first < i) lines &= ~uint64_t{0} << (i - first);              // from i on
            if (lines) return first + 64 - static_cast<size_t>(__builtin_clzll(lines));
            if (first <= i) return i;
        }
    }

    // ---- GPT-4, cut by masks -------------------------------------------------------------------------
    // '(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+
    //
    // Where a chunk starts follows from the classes of a character and of its neighbours, so the split
    // computes a mask of chunk starts, 64 characters at a time, and reads the ends off it; no branch
    // depends on the text but the rare cuts the masks cannot say (contractions, and digit runs longer
    // than three), which are set one by one. The rules, from the pattern (tests check them against regex
    // on every code point and on random text):
    // - a run of letters starts a chunk, unless the character before joins it (?+ takes it): white space
    //   other than a newline, or an "other" that starts its run and has no space before it (a lone one:
    //   a letter follows);
    // - a run of others starts a chunk, at the space before it if there is one; the newlines right after
    //   it are its own;
    // - a run of digits starts a chunk, and again every three digits;
    // - in a run of white space (those newlines aside): a chunk starts where the run starts, after its
    //   last newline (\s*[\r\n] took what is before), and at its last character unless the text ends
    //   there (\s+(?!\S) leaves it, to join what follows or stand alone).

    static uint64_t fill_up(uint64_t seeds, uint64_t through) {  // bits of through reached upward from seeds
        uint64_t reached = seeds, span = through;
        for (int k = 1; k < 64; k *= 2) {
            reached |= span & (reached << k);
            span &= span << k;
        }
        return reached;
    }
    static uint64_t fill_down(uint64_t seeds, uint64_t through) {  // ... and downward
        uint64_t reached = seeds, span = through;
        for (int k = 1; k < 64; k *= 2) {
            reached |= span & (reached >> k);
            span &= span >> k;
        }
        return reached;
    }

    // The length of the contraction at s[i] (an apostrophe), 0 if none.
    template <typename T>
    static size_t contraction_at(const T *s, size_t i, size_t n) {
        if (i + 1 >= n) return 0;
        const uint32_t d = s[i + 1];
        if (folds_to(d, FOLDED_S) || folds_to(d, FOLDED_D) || folds_to(d, FOLDED_M) || folds_to(d, FOLDED_T)) return 2;
        if (i + 2 >= n) return 0;
        const uint32_t e = s[i + 2];
        if ((folds_to(d, FOLDED_L) && folds_to(e, FOLDED_L)) || (folds_to(d, FOLDED_V) && folds_to(e, FOLDED_E)) ||
            (folds_to(d, FOLDED_R) && folds_to(e, FOLDED_E)))
            return 3;
        return 0;
    }

    void mark(size_t i) { starts_[i >> 6] |= uint64_t{1} << (i & 63); }

    // Bit i: bit i - k of the masks, whose word before this one is `before` (bit i - k of the text).
    static uint64_t shifted_up(uint64_t word, uint64_t before, int k = 1) { return (word << k) | (before >> (64 - k)); }

    template <typename T>
    void gpt4_split(const T *s, size_t n, std::vector<size_t> &ends) {
        const size_t count = words_.size();
        lines_.resize(count);  // white space up to the last newline of its run: a fill from the end
        for (size_t w = count, above = 0; w-- > 0;) {
            const ClassWord &c = words_[w];
            lines_[w] = fill_down(c.newline | (c.space & (uint64_t{above} << 63)), c.space);
            above = lines_[w] & 1;
        }
        starts_.assign(count, 0);
        const ClassWord none{};
        uint64_t absorbed_before = 0, joins_before = 0, long_digits_before = 0;
        for (size_t w = 0; w < count; w++) {
            const ClassWord &c = words_[w], &before = w ? words_[w - 1] : none, &after = w + 1 < count ? words_[w + 1] : none;
            const auto prev = [&](uint64_t ClassWord::*m, int k = 1) { return shifted_up(c.*m, before.*m, k); };
            const auto next = [&](uint64_t ClassWord::*m) { return (c.*m >> 1) | (after.*m << 63); };
            const uint64_t other_start = c.other & ~prev(&ClassWord::other);
            const uint64_t other_start_next =
                (other_start >> 1) | ((after.other & ~(c.other >> 63) & 1) << 63);  // bit 0 of the next word's
            const uint64_t after_blank = prev(&ClassWord::blank);
            const uint64_t absorbed =
                fill_up(c.newline & (prev(&ClassWord::other) | (absorbed_before >> 63)), c.newline);
            const uint64_t joins = (c.space & ~c.newline) | (other_start & ~after_blank);
            const uint64_t lines_before = shifted_up(lines_[w], w ? lines_[w - 1] : 0);
            const uint64_t last = w == (n - 1) >> 6 ? uint64_t{1} << ((n - 1) & 63) : 0;
            const uint64_t space_end = c.space & ~next(&ClassWord::space);
            starts_[w] |= (c.letter & ~prev(&ClassWord::letter) & ~shifted_up(joins, joins_before)) |
                          (other_start & ~after_blank) | (c.blank & other_start_next) |
                          (c.number & ~prev(&ClassWord::number)) |
                          (c.space & ~prev(&ClassWord::space) & ~absorbed) |
                          (c.space & ~absorbed & shifted_up(absorbed, absorbed_before)) |
                          (c.space & ~lines_[w] & lines_before) | (space_end & ~lines_[w] & ~absorbed & ~last);
            for (uint64_t at = c.apostrophe & other_start & ~after_blank & next(&ClassWord::letter); at; at &= at - 1) {
                const size_t i = 64 * w + static_cast<size_t>(__builtin_ctzll(at));
                const size_t length = contraction_at(s, i, n);
                if (length && i + length < n && is(&ClassWord::letter, i + length)) mark(i + length);
            }
            const uint64_t long_digits = c.number & prev(&ClassWord::number) & prev(&ClassWord::number, 2) &
                                         prev(&ClassWord::number, 3);  // a fourth digit or later of its run
            for (uint64_t at = long_digits & ~shifted_up(long_digits, long_digits_before); at; at &= at - 1) {
                const size_t fourth = 64 * w + static_cast<size_t>(__builtin_ctzll(at));
                for (size_t i = fourth, end = run_end(&ClassWord::number, fourth); i < end; i += 3) mark(i);
            }
            absorbed_before = absorbed;
            joins_before = joins;
            long_digits_before = long_digits;
        }
        starts_[0] &= ~uint64_t{1};  // the first chunk's start is no chunk's end
        size_t chunks = 1;
        for (const uint64_t word : starts_) chunks += static_cast<size_t>(__builtin_popcountll(word));
        size_t *end = &*ends.insert(ends.end(), chunks, n);  // the last end is n; the others, from the starts
        for (size_t w = 0; w < count; w++)
            for (uint64_t at = starts_[w]; at; at &= at - 1) *end++ = 64 * w + static_cast<size_t>(__builtin_ctzll(at));
    }

    // GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
    template <typename T>
    size_t gpt2_end(const T *s, size_t i, size_t n) const {
        const uint32_t c = s[i];
        if (c == '\'' && i + 1 < n) {
            const uint32_t d = s[i + 1];
            if (d == 's' || d == 't' || d == 'm' || d == 'd') return i + 2;
            if (i + 2 < n) {
                const uint32_t e = s[i + 2];
                if ((d == 'r' && e == 'e') || (d == 'v' && e == 'e') || (d == 'l' && e == 'l')) return i + 3;
            }
        }
        const size_t j = c == ' ' ? i + 1 : i;
        if (j < n) {  // a run of letters, of numbers or of other characters
            if (is(&ClassWord::letter, j)) return run_end(&ClassWord::letter, j + 1);
            if (is(&ClassWord::number, j)) return run_end(&ClassWord::number, j + 1);
            if (is(&ClassWord::other, j)) return run_end(&ClassWord::other, j + 1);
        }
        const size_t end = run_end(&ClassWord::space, i + 1);
        if (end == n || end - 1 == i) return end;
        return end - 1;
    }

    // The word kind's: \p{White_Space}+|\P{White_Space}+
    size_t word_end(size_t i) const {
        return run_end(is(&ClassWord::space, i) ? &ClassWord::space : &ClassWord::not_space, i + 1);
    }

    std::vector<ClassWord> words_;
    std::vector<uint64_t> lines_, starts_;  // gpt4_split's
};

// A text's code points as the caller holds them, one, two or four bytes each (a CPython str's layout);
// the caller keeps the text alive while the view is used.
struct TextView {
    int width;  // bytes per code point: 1, 2 or 4
    bool ascii;
    const void *data;
    size_t length;

    // f(s, ascii) with s the code points typed by their width (ascii is false for two and four bytes).
    template <typename F>
    auto visit(F &&f) const {
        if (width == 1) return f(static_cast<const uint8_t *>(data), ascii);
        if (width == 2) return f(static_cast<const uint16_t *>(data), false);
        return f(static_cast<const uint32_t *>(data), false);
    }

    void split(int mode, Splitter &splitter, std::vector<size_t> &ends) const {
        visit([&](const auto *s, bool) { splitter.split(s, length, mode, ends); });
    }
};

}  // namespace lmprep_native
