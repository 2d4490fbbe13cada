// The native core of the tokenizer: a hand-written pre-tokenizer for the named split patterns, BPE merges
// by rank, and an encoder that splits, looks chunks up in its own cache and merges the misses.
//
// The pure-Python modules (reference.py, encoder.py, patterns.py) are the definition; everything here
// gives exactly their chunks and IDs, which tests/tokenizer/test_native*.py check on random text.
// Written against the CPython C API (see docs/native.md for why). The heavy loops run without the GIL
// on text the caller keeps alive; any str is accepted, lone surrogates included.
//
// This file is the Python side (the Merger and Encoder types, split); the algorithms, free of the
// Python API, are in _native_split.h (pre-tokenizers), _native_bpe.h (merges), _native_cache.h and
// _native_encode.h (the encoding pass, and the threads of one call).

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
#include "_native_encode.h"
#include "_native_split.h"
#include "_native_train_py.h"

namespace {

using namespace lmprep_native;


// A str's code points as the CPython object holds them (one, two or four bytes each).
TextView view_of(PyObject *str) {
    return TextView{static_cast<int>(PyUnicode_KIND(str)), static_cast<bool>(PyUnicode_IS_ASCII(str)),
                    PyUnicode_DATA(str), static_cast<size_t>(PyUnicode_GET_LENGTH(str))};
}

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
    EncoderCore core;
    std::vector<PyObject *> *ints;  // the int of each ID up to the largest returned in a list (GIL held)
};

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
    if (self->core.lock) {
        PyErr_SetString(PyExc_RuntimeError, "Encoder is initialised once");
        return -1;
    }
    try {
        if (PyDict_Check(base)) {  // char kind: {character: base ID}
            self->core.bytes_unit = false;
            delete self->core.chars;
            self->core.chars = new std::unordered_map<uint32_t, uint32_t>();
            PyObject *character, *id;
            Py_ssize_t at = 0;
            while (PyDict_Next(base, &at, &character, &id)) {
                const unsigned long value = PyLong_AsUnsignedLong(id);
                if (!PyUnicode_Check(character) || PyUnicode_GET_LENGTH(character) != 1 || PyErr_Occurred() ||
                    value >= UINT32_MAX) {
                    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "the alphabet maps characters to IDs");
                    return -1;
                }
                (*self->core.chars)[PyUnicode_READ_CHAR(character, 0)] = static_cast<uint32_t>(value);
            }
        } else {  // byte kind: 256 base IDs, by byte value
            std::vector<uint32_t> ids;
            if (!read_ids(base, "the byte IDs must be a sequence of 256 IDs", ids)) return -1;
            if (ids.size() != 256) {
                PyErr_SetString(PyExc_ValueError, "the byte IDs must be a sequence of 256 IDs");
                return -1;
            }
            self->core.bytes_unit = true;
            std::copy(ids.begin(), ids.end(), self->core.byte_ids);
        }
        self->core.cache = new ChunkTable();
        self->ints = new std::vector<PyObject *>();
        self->core.lock = new std::shared_mutex();
    } catch (const std::bad_alloc &) {
        PyErr_NoMemory();
        return -1;
    }
    self->core.table = reinterpret_cast<MergerObject *>(merger)->table;
    self->core.mode = mode;
    self->core.unknown = unknown;
    Py_INCREF(merger);
    self->merger = merger;
    return 0;
}

void Encoder_dealloc(EncoderObject *self) {
    Py_XDECREF(self->merger);
    delete self->core.chars;
    delete self->core.cache;
    delete self->core.lock;
    if (self->ints)
        for (PyObject *value : *self->ints) Py_DECREF(value);
    delete self->ints;
    Py_TYPE(self)->tp_free(reinterpret_cast<PyObject *>(self));
}

bool check_encoder(EncoderObject *self) {
    if (!self->core.lock) PyErr_SetString(PyExc_ValueError, "Encoder was not initialised");
    return self->core.lock != nullptr;
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

// ---- batches: many texts, encoded by one or more threads without the GIL --------------------------

// A reference to each text of a sequence (another thread may change a list meanwhile) and its view.
bool hold_texts(PyObject *fast, const char *method, std::vector<PyObject *> &held, std::vector<TextView> &views) {
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    views.reserve(static_cast<size_t>(n));
    held.reserve(static_cast<size_t>(n));
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *text = PySequence_Fast_GET_ITEM(fast, i);
        if (!PyUnicode_Check(text)) {
            PyErr_Format(PyExc_TypeError, "%s takes str, got %.100s at position %zd", method, Py_TYPE(text)->tp_name,
                         i);
            return false;
        }
        Py_INCREF(text);
        held.push_back(text);
        views.push_back(view_of(text));
    }
    return true;
}

// Encode a sequence of str with `threads` threads into out; false with a Python error set if it failed.
bool encode_batch(EncoderObject *self, PyObject *texts, Py_ssize_t threads, const char *method, Encoded &out) {
    if (!check_encoder(self)) return false;
    if (threads < 1) {
        PyErr_Format(PyExc_ValueError, "%s: threads must be at least 1, got %zd", method, threads);
        return false;
    }
    PyObject *fast = PySequence_Fast(texts, "a batch is a sequence of str");
    if (!fast) return false;
    std::vector<PyObject *> held;
    std::vector<TextView> views;
    bool held_all;
    try {
        held_all = hold_texts(fast, method, held, views);
    } catch (const std::bad_alloc &) {
        PyErr_NoMemory();
        held_all = false;
    }
    if (held_all) {
        Py_BEGIN_ALLOW_THREADS
        encode_all(&self->core, views, static_cast<size_t>(threads), out);
        Py_END_ALLOW_THREADS
        if (out.out_of_memory) PyErr_NoMemory();
        else if (out.failed >= 0) surrogate_error(held[static_cast<size_t>(out.failed)], out.surrogate_at);
    }
    release(held, fast);
    return held_all && !out.out_of_memory && out.failed < 0;
}

// encode_flat(texts, threads=1) -> (ids, offsets): every text's IDs one after another (uint32 bytes) and the
// len(texts) + 1 offsets where each starts (int64 bytes).
PyObject *Encoder_encode_flat(EncoderObject *self, PyObject *args, PyObject *kwargs) {
    static const char *names[] = {"texts", "threads", nullptr};
    PyObject *texts;
    Py_ssize_t threads = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|n", const_cast<char **>(names), &texts, &threads)) return nullptr;
    Encoded out;
    if (!encode_batch(self, texts, threads, "encode_flat", out)) return nullptr;
    PyObject *packed = packed_ids(out.ids);
    PyObject *starts = PyBytes_FromStringAndSize(reinterpret_cast<const char *>(out.offsets.data()),
                                                 static_cast<Py_ssize_t>(out.offsets.size() * sizeof(int64_t)));
    PyObject *result = packed && starts ? PyTuple_Pack(2, packed, starts) : nullptr;
    Py_XDECREF(packed);
    Py_XDECREF(starts);
    return result;
}

// The encoder's int objects for IDs 0..top (made once, then shared by every list it returns); GIL held.
bool cache_ints(EncoderObject *self, uint32_t top) {
    std::vector<PyObject *> &ints = *self->ints;
    while (ints.size() <= top) {
        PyObject *value = PyLong_FromSize_t(ints.size());
        if (!value) return false;
        ints.push_back(value);
    }
    return true;
}

// encode_lists(texts, threads=1) -> list[list[int]]: each text's IDs as a list, as tiktoken returns them.
PyObject *Encoder_encode_lists(EncoderObject *self, PyObject *args, PyObject *kwargs) {
    static const char *names[] = {"texts", "threads", nullptr};
    PyObject *texts;
    Py_ssize_t threads = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|n", const_cast<char **>(names), &texts, &threads)) return nullptr;
    Encoded out;
    if (!encode_batch(self, texts, threads, "encode_lists", out)) return nullptr;
    const uint32_t top = out.ids.empty() ? 0 : *std::max_element(out.ids.begin(), out.ids.end());
    try {
        if (!cache_ints(self, top)) return nullptr;
    } catch (const std::bad_alloc &) {
        return PyErr_NoMemory();
    }
    PyObject *const *ints = self->ints->data();
    const size_t count = out.offsets.size() - 1;
    PyObject *lists = PyList_New(static_cast<Py_ssize_t>(count));
    for (size_t t = 0; lists && t < count; t++) {
        const int64_t start = out.offsets[t], end = out.offsets[t + 1];
        PyObject *list = PyList_New(static_cast<Py_ssize_t>(end - start));
        if (!list) {
            Py_CLEAR(lists);
            break;
        }
        for (int64_t i = start; i < end; i++) {
            PyObject *value = ints[out.ids[static_cast<size_t>(i)]];
            Py_INCREF(value);
            PyList_SET_ITEM(list, static_cast<Py_ssize_t>(i - start), value);
        }
        PyList_SET_ITEM(lists, static_cast<Py_ssize_t>(t), list);
    }
    return lists;
}

// encode(text) -> the IDs of one text as uint32 bytes.
PyObject *Encoder_encode(EncoderObject *self, PyObject *text) {
    if (!check_encoder(self)) return nullptr;
    if (!PyUnicode_Check(text)) {
        PyErr_Format(PyExc_TypeError, "encode takes str, got %.100s", Py_TYPE(text)->tp_name);
        return nullptr;
    }
    Encoded out;
    try {
        const std::vector<TextView> views{view_of(text)};
        Py_BEGIN_ALLOW_THREADS
        encode_all(&self->core, views, 1, out);
        Py_END_ALLOW_THREADS
    } catch (const std::bad_alloc &) {
        return PyErr_NoMemory();
    }
    if (out.out_of_memory) return PyErr_NoMemory();
    if (out.failed >= 0) return surrogate_error(text, out.surrogate_at);
    return packed_ids(out.ids);
}

PyObject *Encoder_get_max_bytes(EncoderObject *self, void *) {
    if (!check_encoder(self)) return nullptr;
    return PyLong_FromSize_t(self->core.cache->max_bytes);
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
        std::unique_lock<std::shared_mutex> hold(*self->core.lock);
        self->core.cache->max_bytes = bound;
        if (self->core.cache->nbytes > bound) self->core.cache->clear();
    }
    Py_END_ALLOW_THREADS
    return 0;
}

PyObject *Encoder_get_nbytes(EncoderObject *self, void *) {
    if (!check_encoder(self)) return nullptr;
    return PyLong_FromSize_t(self->core.cache->nbytes);
}

Py_ssize_t Encoder_len(EncoderObject *self) {
    if (!check_encoder(self)) return -1;
    return static_cast<Py_ssize_t>(self->core.cache->count);
}

PyMethodDef Encoder_methods[] = {
    {"encode", reinterpret_cast<PyCFunction>(Encoder_encode), METH_O,
     "encode(text) -> bytes: the IDs of text as native uint32."},
    {"encode_flat", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(Encoder_encode_flat)),
     METH_VARARGS | METH_KEYWORDS,
     "encode_flat(texts, threads=1) -> (ids, offsets): all IDs as uint32 bytes, len(texts) + 1 offsets as int64 "
     "bytes; threads > 1 encodes ranges of texts in parallel without the GIL (the same result)."},
    {"encode_lists", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(Encoder_encode_lists)),
     METH_VARARGS | METH_KEYWORDS, "encode_lists(texts, threads=1) -> list[list[int]]: each text's IDs as a list."},
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
        view_of(text).split(mode, ends);
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
