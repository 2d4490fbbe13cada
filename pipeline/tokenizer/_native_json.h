// A byte-level tokenizer.json's two large sections, its vocab and its merges, as JSON text: what
// pipeline.engine.atomic.dumps_json writes for them, in one pass over the tokens instead of Python steps per
// token (hf_json.py calls it when it saves; tests/tokenizer/test_native_json.py checks the text against the
// Python path's). Part of the native tokenizer core; no Python API here.
#pragma once

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace lmprep_native {

// How the file spells each byte: `plain`, the UTF-8 of its GPT-2 character (which orders the vocab: code
// point order is the byte order of UTF-8), and `escaped`, that character as a JSON string holds it.
struct ByteSpelling {
    std::string plain[256];
    std::string escaped[256];
};

inline void append_spelled(std::string &out, std::string_view token, const std::string (&table)[256]) {
    for (const char byte : token) out += table[static_cast<unsigned char>(byte)];
}

// Each ID's escaped name, or nothing for an ID that is not a regular token (`regular` lists those).
inline std::vector<std::string> escaped_names(const std::vector<std::string_view> &tokens,
                                              const std::vector<uint32_t> &regular, const ByteSpelling &spelling,
                                              std::vector<bool> &named) {
    std::vector<std::string> names(tokens.size());
    named.assign(tokens.size(), false);
    for (const uint32_t id : regular) {
        if (id >= tokens.size()) throw std::invalid_argument("a regular ID is outside the vocabulary");
        append_spelled(names[id], tokens[id], spelling.escaped);
        named[id] = true;
    }
    return names;
}

// `{"name": id, ...}`, sorted by name, its items at `newline` + `step` and its closing brace at `newline`.
inline std::string vocab_json(const std::vector<std::string_view> &tokens, const std::vector<uint32_t> &regular,
                              const ByteSpelling &spelling, const std::string &newline, const std::string &step) {
    if (regular.empty()) return "{}";
    std::vector<std::pair<std::string, uint32_t>> by_name;
    by_name.reserve(regular.size());
    for (const uint32_t id : regular) {
        if (id >= tokens.size()) throw std::invalid_argument("a regular ID is outside the vocabulary");
        std::string name;
        append_spelled(name, tokens[id], spelling.plain);
        by_name.emplace_back(std::move(name), id);
    }
    std::sort(by_name.begin(), by_name.end());
    const std::string inner = newline + step;
    std::string out = "{";
    for (size_t k = 0; k < by_name.size(); k++) {
        if (k) out += ',';
        out += inner;
        out += '"';
        append_spelled(out, tokens[by_name[k].second], spelling.escaped);
        out += "\": ";
        out += std::to_string(by_name[k].second);
    }
    out += newline;
    out += '}';
    return out;
}

// `[["left", "right"], ...]` in merge order, each pair a list of two names, indented as vocab_json's items.
inline std::string merges_json(const std::vector<std::string_view> &tokens, const std::vector<uint32_t> &regular,
                               const std::vector<uint32_t> &lefts, const std::vector<uint32_t> &rights,
                               const ByteSpelling &spelling, const std::string &newline, const std::string &step) {
    if (lefts.size() != rights.size()) throw std::invalid_argument("as many left IDs as right ones are needed");
    if (lefts.empty()) return "[]";
    std::vector<bool> named;
    const std::vector<std::string> names = escaped_names(tokens, regular, spelling, named);
    const std::string inner = newline + step;
    const std::string open = "[" + inner + step + "\"";
    const std::string middle = "\"," + inner + step + "\"";
    const std::string close = "\"" + inner + "]";
    std::string out = "[";
    for (size_t k = 0; k < lefts.size(); k++) {
        for (const uint32_t id : {lefts[k], rights[k]})
            if (id >= named.size() || !named[id])
                throw std::invalid_argument("merge " + std::to_string(k) + " names ID " + std::to_string(id) +
                                            ", which is not a regular token");
        if (k) out += ',';
        out += inner;
        out += open;
        out += names[lefts[k]];
        out += middle;
        out += names[rights[k]];
        out += close;
    }
    out += newline;
    out += ']';
    return out;
}

}  // namespace lmprep_native
