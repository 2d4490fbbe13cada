// The hand-written pre-tokenizers of the gpt4, gpt2 and word patterns, over code units of any width.
// Part of the native tokenizer core (_native.cpp includes it); no Python API here.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstddef>
#include <string>
#include <unordered_map>
#include <vector>
#include "_unicode_tables.h"

namespace lmprep_native {

// ---- character classes (from _unicode_tables.h, generated from the regex module) ----------------------

enum : uint8_t { LETTER = 1, NUMBER = 2, SPACE = 4 };
constexpr uint32_t CODE_POINTS = 0x110000;
constexpr int BLOCK_BITS = 8;
constexpr uint32_t BLOCK = 1u << BLOCK_BITS;

inline uint16_t block_of[CODE_POINTS >> BLOCK_BITS];  // code point >> 8 -> index of its block of classes
inline std::vector<uint8_t> blocks;                  // distinct blocks of 256 classes, one after another
constexpr uint32_t BMP = 0x10000;
inline uint8_t bmp_classes[BMP];  // the classes of the Basic Multilingual Plane, one load each (64 KB)

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
    std::copy(classes.begin(), classes.begin() + BMP, bmp_classes);
}

inline uint8_t class_of(uint32_t c) {
    if (c < BMP) return bmp_classes[c];
    if (c >= CODE_POINTS) return 0;
    return blocks[(static_cast<size_t>(block_of[c >> BLOCK_BITS]) << BLOCK_BITS) | (c & (BLOCK - 1))];
}
inline bool is_letter(uint32_t c) { return class_of(c) & LETTER; }
inline bool is_number(uint32_t c) { return class_of(c) & NUMBER; }
inline bool is_space(uint32_t c) { return class_of(c) & SPACE; }
inline bool is_other(uint32_t c) { return class_of(c) == 0; }  // [^\s\p{L}\p{N}]
inline bool is_newline(uint32_t c) { return c == '\r' || c == '\n'; }

inline bool folds_to(uint32_t c, const uint32_t *folded) {
    for (; *folded; folded++)
        if (*folded == c) return true;
    return false;
}

// ---- the pre-tokenizers: where the chunk starting at i ends, exactly as regex's findall cuts --------

// GPT-4: '(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+
template <typename T>
size_t gpt4_end(const T *s, size_t i, size_t n) {
    const uint32_t c = s[i];
    if (c == '\'' && i + 1 < n) {
        const uint32_t d = s[i + 1];
        if (folds_to(d, FOLDED_S) || folds_to(d, FOLDED_D) || folds_to(d, FOLDED_M) || folds_to(d, FOLDED_T))
            return i + 2;
        if (i + 2 < n) {
            const uint32_t e = s[i + 2];
            if ((folds_to(d, FOLDED_L) && folds_to(e, FOLDED_L)) || (folds_to(d, FOLDED_V) && folds_to(e, FOLDED_E)) ||
                (folds_to(d, FOLDED_R) && folds_to(e, FOLDED_E)))
                return i + 3;
        }
    }
    const uint8_t k = class_of(c);
    size_t j = (!is_newline(c) && !(k & (LETTER | NUMBER))) ? i + 1 : i;  // [^\r\n\p{L}\p{N}]?+
    if (j < n && is_letter(s[j])) {
        while (++j < n && is_letter(s[j])) {}
        return j;
    }
    if (k & NUMBER) {
        j = i + 1;
        while (j < n && j < i + 3 && is_number(s[j])) j++;
        return j;
    }
    j = c == ' ' ? i + 1 : i;
    if (j < n && is_other(s[j])) {
        while (++j < n && is_other(s[j])) {}
        while (j < n && is_newline(s[j])) j++;
        return j;
    }
    // c is white space (every other character matched above)
    j = i + 1;
    while (j < n && is_space(s[j])) j++;
    for (size_t end = j; end > i; end--)
        if (is_newline(s[end - 1])) return end;  // \s*[\r\n]
    if (j == n || j - 1 == i) return j;           // \s+(?!\S) at the end of the text, or \s+ of one character
    return j - 1;                                  // \s+(?!\S): the run but its last space
}

// GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
template <typename T>
size_t gpt2_end(const T *s, size_t i, size_t n) {
    const uint32_t c = s[i];
    if (c == '\'' && i + 1 < n) {
        const uint32_t d = s[i + 1];
        if (d == 's' || d == 't' || d == 'm' || d == 'd') return i + 2;
        if (i + 2 < n) {
            const uint32_t e = s[i + 2];
            if ((d == 'r' && e == 'e') || (d == 'v' && e == 'e') || (d == 'l' && e == 'l')) return i + 3;
        }
    }
    size_t j = c == ' ' ? i + 1 : i;
    if (j < n) {
        const uint8_t k = class_of(s[j]);
        if (!(k & SPACE)) {  // a run of letters, of numbers or of other characters
            while (++j < n && class_of(s[j]) == k) {}
            return j;
        }
    }
    j = i + 1;
    while (j < n && is_space(s[j])) j++;
    if (j == n || j - 1 == i) return j;
    return j - 1;
}

// The word kind's: \p{White_Space}+|\P{White_Space}+
template <typename T>
size_t word_end(const T *s, size_t i, size_t n) {
    const bool space = is_space(s[i]);
    size_t j = i + 1;
    while (j < n && is_space(s[j]) == space) j++;
    return j;
}

// The split modes, defined here once: Python reads them by name from _native.SPLIT_MODES.
enum Mode : int { GPT4 = 0, GPT2 = 1, WORD = 2, WHOLE = 3 };  // WHOLE: no pre-split (pattern none)

struct ModeName {
    const char *name;  // as patterns.py names the pattern
    Mode mode;
};
constexpr ModeName MODE_NAMES[] = {{"gpt4", GPT4}, {"gpt2", GPT2}, {"word", WORD}, {"none", WHOLE}};

inline bool valid_mode(int mode) { return mode >= GPT4 && mode <= WHOLE; }

template <typename T>
void split_ends(const T *s, size_t n, int mode, std::vector<size_t> &ends) {
    size_t i = 0;
    while (i < n) {
        switch (mode) {
            case GPT4: i = gpt4_end(s, i, n); break;
            case GPT2: i = gpt2_end(s, i, n); break;
            case WORD: i = word_end(s, i, n); break;
            default: i = n;
        }
        ends.push_back(i);
    }
}

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

    void split(int mode, std::vector<size_t> &ends) const {
        visit([&](const auto *s, bool) { split_ends(s, length, mode, ends); });
    }
};

}  // namespace lmprep_native
