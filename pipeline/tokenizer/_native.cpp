// The native core of the tokenizer: a hand-written pre-tokenizer for the named split patterns, BPE merges
// by rank, and an encoder that splits, looks chunks up in its own cache and merges the misses.
//
// The pure-Python modules (reference.py, encoder.py, patterns.py) are the definition; everything here
// gives exactly their chunks and IDs, which tests/tokenizer/test_native*.py check on random text.
// Written against the CPython C API (see docs/native.md for why). The heavy loops run without the GIL
// on text the caller keeps alive; any str is accepted, lone surrogates included.
//
// This file is the Python side (the Merger and Encoder types, split); the algorithms, free of the
// Python API, are in _native_split.h (pre-tokenizers), _native_bpe.h (merges) and _native_cache.h.

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <shared_mutex>
#include <new>
#include <queue>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "_native_bpe.h"
#include "_native_cache.h"
#include "_native_split.h"
#include "_native_train_py.h"

namespace {

using namespace lmprep_native;


// A str's code points as the CPython object holds them (one, two or four bytes each).
struct Text {
    int kind;
    bool ascii;
    const void *data;
    size_t length;

    explicit Text(PyObject *str)
        : kind(PyUnicode_KIND(str)), ascii(PyUnicode_IS_ASCII(str)), data(PyUnicode_DATA(str)),
          length(static_cast<size_t>(PyUnicode_GET_LENGTH(str))) {}

    void split(int mode, std::vector<size_t> &ends) const {
        if (kind == PyUnicode_1BYTE_KIND) split_ends(static_cast<const Py_UCS1 *>(data), length, mode, ends);
        else if (kind == PyUnicode_2BYTE_KIND) split_ends(static_cast<const Py_UCS2 *>(data), length, mode, ends);
        else split_ends(static_cast<const Py_UCS4 *>(data), length, mode, ends);
    }
};

// ---- Merger: the merges of one tokenizer, for Python ----------------------------------------------

struct MergerObject {
    PyObject_HEAD
    MergeTable *table;
};

bool read_ids(PyObject *sequence, const char *what, std::vector<uint32_t> &out) {
    PyObject *fast = PySequence_Fast(sequence, what);
    if (!fast) return false;
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    out.reserve(static_cast<size_t>(n));
    for (Py_ssize_t i = 0; i < n; i++) {
        const unsigned long value = PyLong_AsUnsignedLong(PySequence_Fast_GET_ITEM(fast, i));
        if (PyErr_Occurred() || value >= UINT32_MAX) {
            Py_DECREF(fast);
            if (!PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "%s: ID %lu is too large", what, value);
            return false;
        }
        out.push_back(static_cast<uint32_t>(value));
    }
    Py_DECREF(fast);
    return true;
}

int Merger_init(MergerObject *self, PyObject *args, PyObject *) {
    PyObject *lefts, *rights, *results;
    if (!PyArg_ParseTuple(args, "OOO", &lefts, &rights, &results)) return -1;
    if (self->table) {  // an Encoder may be reading this table without the GIL
        PyErr_SetString(PyExc_RuntimeError, "Merger is initialised once");
        return -1;
    }
    std::vector<uint32_t> a, b, made;
    if (!read_ids(lefts, "lefts must be a sequence of IDs", a) ||
        !read_ids(rights, "rights must be a sequence of IDs", b) ||
        !read_ids(results, "results must be a sequence of IDs", made))
        return -1;
    if (a.size() != b.size() || a.size() != made.size()) {
        PyErr_SetString(PyExc_ValueError, "lefts, rights and results must have one entry per merge");
        return -1;
    }
    std::vector<std::pair<uint32_t, uint32_t>> pairs(a.size());
    for (size_t i = 0; i < a.size(); i++) pairs[i] = {a[i], b[i]};
    auto *table = new (std::nothrow) MergeTable();
    if (!table) {
        PyErr_NoMemory();
        return -1;
    }
    try {
        table->build(pairs, made);
    } catch (const std::bad_alloc &) {
        delete table;
        PyErr_NoMemory();
        return -1;
    }
    self->table = table;
    return 0;
}

void Merger_dealloc(MergerObject *self) {
    delete self->table;
    Py_TYPE(self)->tp_free(reinterpret_cast<PyObject *>(self));
}

bool check_ready(MergerObject *self) {
    if (!self->table) PyErr_SetString(PyExc_ValueError, "Merger was not initialised");
    return self->table != nullptr;
}

// merge_packed(ids, lengths) -> list[bytes]: ids (uint32, native order) are the chunks' base IDs one
// after another, lengths (int64) how many each has; each chunk comes back merged, as uint32 bytes.
PyObject *Merger_merge_packed(MergerObject *self, PyObject *args) {
    if (!check_ready(self)) return nullptr;
    Py_buffer ids_view, lengths_view;
    if (!PyArg_ParseTuple(args, "y*y*", &ids_view, &lengths_view)) return nullptr;
    PyObject *result = nullptr;
    const size_t id_count = static_cast<size_t>(ids_view.len) / sizeof(uint32_t);
    const size_t chunk_count = static_cast<size_t>(lengths_view.len) / sizeof(int64_t);
    std::vector<uint32_t> ids;
    std::vector<size_t> merged;
    const int64_t *lengths = static_cast<const int64_t *>(lengths_view.buf);
    size_t total = 0;
    bool valid = ids_view.len % sizeof(uint32_t) == 0 && lengths_view.len % sizeof(int64_t) == 0;
    for (size_t c = 0; valid && c < chunk_count; c++) {
        valid = lengths[c] >= 0 && static_cast<uint64_t>(lengths[c]) <= id_count - total;
        if (valid) total += static_cast<size_t>(lengths[c]);
    }
    if (!valid || total != id_count) {
        PyErr_SetString(PyExc_ValueError, "merge_packed: the lengths must add up to the number of uint32 IDs");
        goto done;
    }
    try {
        ids.assign(static_cast<const uint32_t *>(ids_view.buf), static_cast<const uint32_t *>(ids_view.buf) + id_count);
        merged.resize(chunk_count);
    } catch (const std::bad_alloc &) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    size_t start = 0;
    for (size_t c = 0; c < chunk_count; c++) {
        merged[c] = apply_merges(ids.data() + start, static_cast<size_t>(lengths[c]), *self->table);
        start += static_cast<size_t>(lengths[c]);
    }
    Py_END_ALLOW_THREADS
    result = PyList_New(static_cast<Py_ssize_t>(chunk_count));
    if (result) {
        size_t start = 0;
        for (size_t c = 0; c < chunk_count; c++) {
            PyObject *packed = PyBytes_FromStringAndSize(reinterpret_cast<const char *>(ids.data() + start),
                                                         static_cast<Py_ssize_t>(merged[c] * sizeof(uint32_t)));
            if (!packed) {
                Py_CLEAR(result);
                break;
            }
            PyList_SET_ITEM(result, static_cast<Py_ssize_t>(c), packed);
            start += static_cast<size_t>(lengths[c]);
        }
    }
done:
    PyBuffer_Release(&ids_view);
    PyBuffer_Release(&lengths_view);
    return result;
}

PyMethodDef Merger_methods[] = {
    {"merge_packed", reinterpret_cast<PyCFunction>(Merger_merge_packed), METH_VARARGS,
     "merge_packed(ids, lengths) -> list[bytes]: each chunk's base IDs merged by rank, as uint32 bytes."},
    {nullptr, nullptr, 0, nullptr},
};

PyTypeObject MergerType = {PyVarObject_HEAD_INIT(nullptr, 0)};

// ---- Encoder: split, chunk cache, merges for the misses -------------------------------------------

struct EncoderObject {
    PyObject_HEAD
    PyObject *merger;  // the Merger whose table this encoder uses (kept alive here)
    int mode;
    bool bytes_unit;                                // byte kind: base IDs per UTF-8 byte; else per character
    uint32_t byte_ids[256];                         // byte kind: byte -> base ID
    std::unordered_map<uint32_t, uint32_t> *chars;  // char kind: code point -> base ID
    uint32_t unknown;                               // char kind: the ID of a character not in the alphabet
    ChunkTable *cache;
    std::shared_mutex *lock;  // shared to read the cache, exclusive to add to it; taken without the GIL
};

// What one encoding pass needs besides the encoder: reusable buffers, and where a text failed.
struct Pass {
    struct New {  // a chunk the cache did not hold: its key in new_keys, its IDs in the output
        uint64_t hash;
        size_t key_at, key_length, ids_at, ids_length;
    };
    std::vector<size_t> ends;
    std::string key;
    std::vector<uint32_t> ids;
    std::vector<New> new_chunks;
    std::string new_keys;
    Py_ssize_t surrogate_at = -1;  // byte kind: the position of a lone surrogate, which UTF-8 cannot hold
};

constexpr size_t NEW_CHUNKS_HELD = 64;  // new chunks a pass holds before it adds them to the cache

// Add the pass's new chunks to the cache. Called with the shared lock held; returns with it held, having
// taken the exclusive lock meanwhile (so threads encoding with one encoder look chunks up in parallel
// and take turns only to add). Never throws: out of memory, the cache starts over.
void add_new_chunks(EncoderObject *self, Pass &pass, const std::vector<uint32_t> &out) {
    if (pass.new_chunks.empty()) return;
    self->lock->unlock_shared();
    self->lock->lock();
    try {
        for (const Pass::New &chunk : pass.new_chunks) {
            const char *key = pass.new_keys.data() + chunk.key_at;
            size_t length;
            if (!self->cache->find(chunk.hash, key, chunk.key_length, &length))  // another thread may have added it
                self->cache->insert(chunk.hash, key, chunk.key_length, out.data() + chunk.ids_at, chunk.ids_length);
        }
    } catch (const std::bad_alloc &) {
        self->cache->clear();
    }
    self->lock->unlock();
    self->lock->lock_shared();
    pass.new_chunks.clear();
    pass.new_keys.clear();
}

// The shared lock on an encoder's cache for one call; the pass's new chunks go in before it is let go.
class CacheHold {
  public:
    CacheHold(EncoderObject *self, Pass &pass, const std::vector<uint32_t> &out) : self_(self), pass_(pass), out_(out) {
        self_->lock->lock_shared();
    }
    ~CacheHold() {
        add_new_chunks(self_, pass_, out_);
        self_->lock->unlock_shared();
    }
    CacheHold(const CacheHold &) = delete;
    CacheHold &operator=(const CacheHold &) = delete;

  private:
    EncoderObject *self_;
    Pass &pass_;
    const std::vector<uint32_t> &out_;
};

// Encode the code units s[0..n) of one text, appending its IDs to out; false (with pass.surrogate_at) if
// the byte kind meets a lone surrogate.
template <typename T>
bool encode_units(EncoderObject *self, const T *s, size_t n, bool ascii, Pass &pass, std::vector<uint32_t> &out) {
    const MergeTable &table = *reinterpret_cast<MergerObject *>(self->merger)->table;
    pass.ends.clear();
    split_ends(s, n, self->mode, pass.ends);
    size_t start = 0;
    for (size_t end : pass.ends) {
        if (ascii) {
            pass.key.assign(reinterpret_cast<const char *>(s + start), end - start);
        } else {
            pass.key.clear();
            for (size_t i = start; i < end; i++) {
                if (self->bytes_unit && is_surrogate(s[i])) {
                    pass.surrogate_at = static_cast<Py_ssize_t>(i);
                    return false;
                }
                append_utf8(pass.key, s[i]);
            }
        }
        const bool cacheable = end - start <= CACHE_MAX_CHUNK;
        const uint64_t hash = cacheable ? hash_bytes(pass.key.data(), pass.key.size()) : 0;
        size_t length;
        const uint32_t *found =
            cacheable ? self->cache->find(hash, pass.key.data(), pass.key.size(), &length) : nullptr;
        if (found) {
            out.insert(out.end(), found, found + length);
        } else {
            pass.ids.clear();
            if (self->bytes_unit) {
                for (unsigned char byte : pass.key) pass.ids.push_back(self->byte_ids[byte]);
            } else {
                for (size_t i = start; i < end; i++) {
                    const auto id = self->chars->find(s[i]);
                    pass.ids.push_back(id == self->chars->end() ? self->unknown : id->second);
                }
            }
            const size_t merged = apply_merges(pass.ids.data(), pass.ids.size(), table);
            const size_t ids_at = out.size();
            out.insert(out.end(), pass.ids.begin(), pass.ids.begin() + static_cast<std::ptrdiff_t>(merged));
            if (cacheable) {  // recorded once its IDs and key are stored, so that it never points past them
                const size_t key_at = pass.new_keys.size();
                pass.new_keys += pass.key;
                pass.new_chunks.push_back(Pass::New{hash, key_at, pass.key.size(), ids_at, merged});
                if (pass.new_chunks.size() >= NEW_CHUNKS_HELD) add_new_chunks(self, pass, out);
            }
        }
        start = end;
    }
    return true;
}

bool encode_text(EncoderObject *self, const Text &text, Pass &pass, std::vector<uint32_t> &out) {
    if (text.kind == PyUnicode_1BYTE_KIND)
        return encode_units(self, static_cast<const Py_UCS1 *>(text.data), text.length, text.ascii, pass, out);
    if (text.kind == PyUnicode_2BYTE_KIND)
        return encode_units(self, static_cast<const Py_UCS2 *>(text.data), text.length, false, pass, out);
    return encode_units(self, static_cast<const Py_UCS4 *>(text.data), text.length, false, pass, out);
}

PyObject *surrogate_error(PyObject *text, Py_ssize_t at) {
    PyObject *error = PyObject_CallFunction(PyExc_UnicodeEncodeError, "sOnns", "utf-8", text, at, at + 1,
                                            "surrogates not allowed");
    if (error) {
        PyErr_SetObject(PyExc_UnicodeEncodeError, error);
        Py_DECREF(error);
    }
    return nullptr;
}

int Encoder_init(EncoderObject *self, PyObject *args, PyObject *) {
    PyObject *merger, *base;
    int mode;
    unsigned int unknown;
    if (!PyArg_ParseTuple(args, "O!iOI", &MergerType, &merger, &mode, &base, &unknown)) return -1;
    if (!valid_mode(mode)) {
        PyErr_Format(PyExc_ValueError, "unknown split mode %d", mode);
        return -1;
    }
    if (!reinterpret_cast<MergerObject *>(merger)->table) {
        PyErr_SetString(PyExc_ValueError, "Merger was not initialised");
        return -1;
    }
    if (self->lock) {
        PyErr_SetString(PyExc_RuntimeError, "Encoder is initialised once");
        return -1;
    }
    try {
        if (PyDict_Check(base)) {  // char kind: {character: base ID}
            self->bytes_unit = false;
            delete self->chars;
            self->chars = new std::unordered_map<uint32_t, uint32_t>();
            PyObject *character, *id;
            Py_ssize_t at = 0;
            while (PyDict_Next(base, &at, &character, &id)) {
                const unsigned long value = PyLong_AsUnsignedLong(id);
                if (!PyUnicode_Check(character) || PyUnicode_GET_LENGTH(character) != 1 || PyErr_Occurred() ||
                    value >= UINT32_MAX) {
                    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "the alphabet maps characters to IDs");
                    return -1;
                }
                (*self->chars)[PyUnicode_READ_CHAR(character, 0)] = static_cast<uint32_t>(value);
            }
        } else {  // byte kind: 256 base IDs, by byte value
            std::vector<uint32_t> ids;
            if (!read_ids(base, "the byte IDs must be a sequence of 256 IDs", ids)) return -1;
            if (ids.size() != 256) {
                PyErr_SetString(PyExc_ValueError, "the byte IDs must be a sequence of 256 IDs");
                return -1;
            }
            self->bytes_unit = true;
            std::copy(ids.begin(), ids.end(), self->byte_ids);
        }
        self->cache = new ChunkTable();
        self->lock = new std::shared_mutex();
    } catch (const std::bad_alloc &) {
        PyErr_NoMemory();
        return -1;
    }
    self->mode = mode;
    self->unknown = unknown;
    Py_INCREF(merger);
    self->merger = merger;
    return 0;
}

void Encoder_dealloc(EncoderObject *self) {
    Py_XDECREF(self->merger);
    delete self->chars;
    delete self->cache;
    delete self->lock;
    Py_TYPE(self)->tp_free(reinterpret_cast<PyObject *>(self));
}

bool check_encoder(EncoderObject *self) {
    if (!self->lock) PyErr_SetString(PyExc_ValueError, "Encoder was not initialised");
    return self->lock != nullptr;
}

PyObject *packed_ids(const std::vector<uint32_t> &ids) {
    return PyBytes_FromStringAndSize(reinterpret_cast<const char *>(ids.data()),
                                     static_cast<Py_ssize_t>(ids.size() * sizeof(uint32_t)));
}

void release(std::vector<PyObject *> &held, PyObject *fast) {
    for (PyObject *text : held) Py_DECREF(text);
    held.clear();
    Py_DECREF(fast);
}

// encode_flat(texts) -> (ids, offsets): every text's IDs one after another (uint32 bytes) and the
// len(texts) + 1 offsets where each starts (int64 bytes). The texts are split and encoded without the GIL.
PyObject *Encoder_encode_flat(EncoderObject *self, PyObject *texts) {
    if (!check_encoder(self)) return nullptr;
    PyObject *fast = PySequence_Fast(texts, "encode_flat takes a sequence of str");
    if (!fast) return nullptr;
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    std::vector<PyObject *> held;  // a reference to each text: another thread may change a list meanwhile
    std::vector<Text> views;
    std::vector<uint32_t> ids;
    std::vector<int64_t> offsets;
    Pass pass;
    Py_ssize_t failed = -1;
    PyObject *result = nullptr;
    try {
        views.reserve(static_cast<size_t>(n));
        held.reserve(static_cast<size_t>(n));
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *text = PySequence_Fast_GET_ITEM(fast, i);
            if (!PyUnicode_Check(text)) {
                PyErr_Format(PyExc_TypeError, "encode_flat takes str, got %.100s at position %zd",
                             Py_TYPE(text)->tp_name, i);
                break;
            }
            Py_INCREF(text);
            held.push_back(text);
            views.emplace_back(text);
        }
        if (PyErr_Occurred()) {
            release(held, fast);
            return nullptr;
        }
        offsets.reserve(static_cast<size_t>(n) + 1);
        offsets.push_back(0);
        bool out_of_memory = false;
        Py_BEGIN_ALLOW_THREADS
        {
            CacheHold hold(self, pass, ids);
            try {
                for (Py_ssize_t i = 0; i < n; i++) {
                    if (!encode_text(self, views[static_cast<size_t>(i)], pass, ids)) {
                        failed = i;
                        break;
                    }
                    offsets.push_back(static_cast<int64_t>(ids.size()));
                }
            } catch (const std::bad_alloc &) {
                out_of_memory = true;
            }
        }
        Py_END_ALLOW_THREADS
        if (out_of_memory) throw std::bad_alloc();
    } catch (const std::bad_alloc &) {
        release(held, fast);
        return PyErr_NoMemory();
    }
    if (failed >= 0) {
        surrogate_error(held[static_cast<size_t>(failed)], pass.surrogate_at);
    } else {
        PyObject *packed = packed_ids(ids);
        PyObject *starts = PyBytes_FromStringAndSize(reinterpret_cast<const char *>(offsets.data()),
                                                     static_cast<Py_ssize_t>(offsets.size() * sizeof(int64_t)));
        if (packed && starts) result = PyTuple_Pack(2, packed, starts);
        Py_XDECREF(packed);
        Py_XDECREF(starts);
    }
    release(held, fast);
    return result;
}

// encode(text) -> the IDs of one text as uint32 bytes.
PyObject *Encoder_encode(EncoderObject *self, PyObject *text) {
    if (!check_encoder(self)) return nullptr;
    if (!PyUnicode_Check(text)) {
        PyErr_Format(PyExc_TypeError, "encode takes str, got %.100s", Py_TYPE(text)->tp_name);
        return nullptr;
    }
    const Text view(text);
    std::vector<uint32_t> ids;
    Pass pass;
    bool encoded = false, out_of_memory = false;
    Py_BEGIN_ALLOW_THREADS
    {
        CacheHold hold(self, pass, ids);
        try {
            encoded = encode_text(self, view, pass, ids);
        } catch (const std::bad_alloc &) {
            out_of_memory = true;
        }
    }
    Py_END_ALLOW_THREADS
    if (out_of_memory) return PyErr_NoMemory();
    if (!encoded) return surrogate_error(text, pass.surrogate_at);
    return packed_ids(ids);
}

PyObject *Encoder_get_max_bytes(EncoderObject *self, void *) {
    if (!check_encoder(self)) return nullptr;
    return PyLong_FromSize_t(self->cache->max_bytes);
}

int Encoder_set_max_bytes(EncoderObject *self, PyObject *value, void *) {
    if (!check_encoder(self)) return -1;
    if (!value) {
        PyErr_SetString(PyExc_AttributeError, "max_bytes cannot be deleted");
        return -1;
    }
    const size_t bound = PyLong_AsSize_t(value);
    if (bound == static_cast<size_t>(-1) && PyErr_Occurred()) return -1;
    Py_BEGIN_ALLOW_THREADS
    {
        std::unique_lock<std::shared_mutex> hold(*self->lock);
        self->cache->max_bytes = bound;
        if (self->cache->nbytes > bound) self->cache->clear();
    }
    Py_END_ALLOW_THREADS
    return 0;
}

PyObject *Encoder_get_nbytes(EncoderObject *self, void *) {
    if (!check_encoder(self)) return nullptr;
    return PyLong_FromSize_t(self->cache->nbytes);
}

Py_ssize_t Encoder_len(EncoderObject *self) {
    if (!check_encoder(self)) return -1;
    return static_cast<Py_ssize_t>(self->cache->count);
}

PyMethodDef Encoder_methods[] = {
    {"encode", reinterpret_cast<PyCFunction>(Encoder_encode), METH_O,
     "encode(text) -> bytes: the IDs of text as native uint32."},
    {"encode_flat", reinterpret_cast<PyCFunction>(Encoder_encode_flat), METH_O,
     "encode_flat(texts) -> (ids, offsets): all IDs as uint32 bytes, len(texts) + 1 offsets as int64 bytes."},
    {nullptr, nullptr, 0, nullptr},
};

PyGetSetDef Encoder_getset[] = {
    {"max_bytes", reinterpret_cast<getter>(Encoder_get_max_bytes), reinterpret_cast<setter>(Encoder_set_max_bytes),
     "The cache's bound in bytes (it starts over when an entry would pass it).", nullptr},
    {"nbytes", reinterpret_cast<getter>(Encoder_get_nbytes), nullptr, "The bytes the cache's entries count.", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

PySequenceMethods Encoder_sequence = {reinterpret_cast<lenfunc>(Encoder_len)};

PyTypeObject EncoderType = {PyVarObject_HEAD_INIT(nullptr, 0)};

// ---- split: the pre-tokenizer for Python ----------------------------------------------------------

PyObject *native_split(PyObject *, PyObject *args) {
    int mode;
    PyObject *text;
    if (!PyArg_ParseTuple(args, "iU", &mode, &text)) return nullptr;
    if (!valid_mode(mode)) {
        PyErr_Format(PyExc_ValueError, "unknown split mode %d", mode);
        return nullptr;
    }
    std::vector<size_t> ends;
    try {
        Text(text).split(mode, ends);
    } catch (const std::bad_alloc &) {
        return PyErr_NoMemory();
    }
    PyObject *chunks = PyList_New(static_cast<Py_ssize_t>(ends.size()));
    if (!chunks) return nullptr;
    size_t start = 0;
    for (size_t c = 0; c < ends.size(); c++) {
        PyObject *chunk = PyUnicode_Substring(text, static_cast<Py_ssize_t>(start), static_cast<Py_ssize_t>(ends[c]));
        if (!chunk) {
            Py_DECREF(chunks);
            return nullptr;
        }
        PyList_SET_ITEM(chunks, static_cast<Py_ssize_t>(c), chunk);
        start = ends[c];
    }
    return chunks;
}

PyMethodDef module_methods[] = {
    {"split", native_split, METH_VARARGS,
     "split(mode, text) -> list[str]: the chunks of text under a named pattern (0 gpt4, 1 gpt2, 2 word, 3 none)."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef native_module = {PyModuleDef_HEAD_INIT, "_native", "The native core of lmprep's tokenizer.", -1,
                             module_methods};

}  // namespace

PyMODINIT_FUNC PyInit__native(void) {
    try {
        build_class_table();
    } catch (const std::bad_alloc &) {
        return PyErr_NoMemory();
    }
    MergerType.tp_name = "pipeline.tokenizer._native.Merger";
    MergerType.tp_basicsize = sizeof(MergerObject);
    MergerType.tp_flags = Py_TPFLAGS_DEFAULT;
    MergerType.tp_doc = "Merger(lefts, rights, results): the merges of one tokenizer, rank i merging "
                        "(lefts[i], rights[i]) into results[i].";
    MergerType.tp_new = PyType_GenericNew;
    MergerType.tp_init = reinterpret_cast<initproc>(Merger_init);
    MergerType.tp_dealloc = reinterpret_cast<destructor>(Merger_dealloc);
    MergerType.tp_methods = Merger_methods;
    if (PyType_Ready(&MergerType) < 0) return nullptr;
    EncoderType.tp_name = "pipeline.tokenizer._native.Encoder";
    EncoderType.tp_basicsize = sizeof(EncoderObject);
    EncoderType.tp_flags = Py_TPFLAGS_DEFAULT;
    EncoderType.tp_doc = "Encoder(merger, mode, base, unknown): split, cache and merge in one pass; base is the "
                         "256 IDs of the bytes (byte kind) or a dict character -> ID (char kind).";
    EncoderType.tp_new = PyType_GenericNew;
    EncoderType.tp_init = reinterpret_cast<initproc>(Encoder_init);
    EncoderType.tp_dealloc = reinterpret_cast<destructor>(Encoder_dealloc);
    EncoderType.tp_methods = Encoder_methods;
    EncoderType.tp_getset = Encoder_getset;
    EncoderType.tp_as_sequence = &Encoder_sequence;
    if (PyType_Ready(&EncoderType) < 0) return nullptr;
    PyObject *module = PyModule_Create(&native_module);
    if (!module) return nullptr;
    if (PyModule_AddObjectRef(module, "Merger", reinterpret_cast<PyObject *>(&MergerType)) < 0 ||
        PyModule_AddObjectRef(module, "Encoder", reinterpret_cast<PyObject *>(&EncoderType)) < 0 ||
        !lmprep_native_py::add_training_types(module)) {
        Py_DECREF(module);
        return nullptr;
    }
    return module;
}
