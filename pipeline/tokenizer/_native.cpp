// The native core of the tokenizer, its Python side: the Encoder, ChunkCounter and PairMerger types and
// split. The algorithms, free of the Python API, are in headers: _native_split.h (pre-tokenizers and the
// split modes), _native_bpe.h (merges), _native_cache.h and _native_encode.h (the encoding pass),
// _native_train.h (counting and the merge loop), _native_threads.h (the threads of one call) and
// _native_fault.h (failures the tests inject); _native_json.h writes a byte-level tokenizer.json's vocab and
// merges.
//
// reference.py is the definition; everything here gives exactly its chunks, IDs and merges, which
// tests/tokenizer/test_native*.py check on random text. Written against the CPython C API (see
// docs/native.md for why). The heavy loops run without the GIL (through without_gil, which keeps C++
// exceptions on that side) on text the caller keeps alive; any str is accepted, lone surrogates included.

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <shared_mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "_native_bpe.h"
#include "_native_cache.h"
#include "_native_encode.h"
#include "_native_fault.h"
#include "_native_json.h"
#include "_native_split.h"
#include "_native_train.h"

namespace {

using namespace lmprep_native;

// ---- the GIL and C++ exceptions ------------------------------------------------------------------

// Sets the Python error for a C++ exception: MemoryError for bad_alloc, ValueError (prefixed with what)
// for a refused argument, RuntimeError otherwise. Only with the GIL held: a Python error set without it
// corrupts the interpreter, so that is a fatal error here rather than a crash later.
void set_error(const std::exception_ptr &failure, const char *what) {
    if (!PyGILState_Check()) Py_FatalError("lmprep native core: a Python error was set without the GIL");
    try {
        std::rethrow_exception(failure);
    } catch (const std::bad_alloc &) {
        PyErr_NoMemory();
    } catch (const std::invalid_argument &exc) {
        PyErr_Format(PyExc_ValueError, "%s: %s", what, exc.what());
    } catch (const std::length_error &exc) {
        PyErr_Format(PyExc_ValueError, "%s: %s", what, exc.what());
    } catch (const std::exception &exc) {
        PyErr_Format(PyExc_RuntimeError, "%s: %s", what, exc.what());
    } catch (...) {
        PyErr_Format(PyExc_RuntimeError, "%s failed", what);
    }
}

// Runs work with the GIL released. An exception it throws is caught on that side and turned into a Python
// error once the GIL is back (set_error), so no catch ever runs Python code without the GIL; false then.
template <typename Work>
bool without_gil(const char *what, Work &&work) {
    std::exception_ptr failure;
    Py_BEGIN_ALLOW_THREADS
    try {
        fault_point(WITHOUT_GIL);
        work();
    } catch (...) {
        failure = std::current_exception();
    }
    Py_END_ALLOW_THREADS
    if (failure) set_error(failure, what);
    return !failure;
}

// Runs work with the GIL held, a C++ exception turned into a Python error (false then).
template <typename Work>
bool with_gil(const char *what, Work &&work) {
    try {
        work();
        return true;
    } catch (...) {
        set_error(std::current_exception(), what);
        return false;
    }
}

// A str's code points as the CPython object holds them (one, two or four bytes each).
TextView view_of(PyObject *str) {
    return TextView{static_cast<int>(PyUnicode_KIND(str)), static_cast<bool>(PyUnicode_IS_ASCII(str)),
                    PyUnicode_DATA(str), static_cast<size_t>(PyUnicode_GET_LENGTH(str))};
}

bool check_mode(int mode) {
    if (!valid_mode(mode)) PyErr_Format(PyExc_ValueError, "unknown split mode %d", mode);
    return valid_mode(mode);
}

// Refuses a second call while one runs without the GIL (another Python thread on the same object).
bool claim(bool &busy, const char *type) {
    if (busy) {
        PyErr_Format(PyExc_RuntimeError, "this %s is in use by another thread", type);
        return false;
    }
    busy = true;
    return true;
}

// The texts of a sequence, each held (another thread may change a list meanwhile) and viewed; false with a
// Python error set if one is not a str. The holder releases them.
class HeldTexts {
  public:
    ~HeldTexts() {
        for (PyObject *text : held_) Py_DECREF(text);
        Py_XDECREF(fast_);
    }
    bool hold(PyObject *texts, const char *method) {
        fast_ = PySequence_Fast(texts, "a batch is a sequence of str");
        if (!fast_) return false;
        const Py_ssize_t n = PySequence_Fast_GET_SIZE(fast_);
        return with_gil(method, [&] {
            held_.reserve(static_cast<size_t>(n));
            views.reserve(static_cast<size_t>(n));
        }) && hold_each(method, n);
    }
    PyObject *operator[](size_t i) const { return held_[i]; }
    std::vector<TextView> views;

  private:
    bool hold_each(const char *method, Py_ssize_t n) {
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *text = PySequence_Fast_GET_ITEM(fast_, i);
            if (!PyUnicode_Check(text)) {
                PyErr_Format(PyExc_TypeError, "%s takes str, got %.100s at position %zd", method,
                             Py_TYPE(text)->tp_name, i);
                return false;
            }
            Py_INCREF(text);
            held_.push_back(text);
            views.push_back(view_of(text));
        }
        return true;
    }
    PyObject *fast_ = nullptr;
    std::vector<PyObject *> held_;
};

bool read_ids(PyObject *sequence, const char *what, std::vector<uint32_t> &out) {
    PyObject *fast = PySequence_Fast(sequence, what);
    if (!fast) return false;
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    bool ok = with_gil(what, [&] { out.reserve(static_cast<size_t>(n)); });
    for (Py_ssize_t i = 0; ok && i < n; i++) {
        const unsigned long value = PyLong_AsUnsignedLong(PySequence_Fast_GET_ITEM(fast, i));
        ok = !PyErr_Occurred() && value < UINT32_MAX;
        if (!ok && !PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "%s: ID %lu is too large", what, value);
        if (ok) out.push_back(static_cast<uint32_t>(value));
    }
    Py_DECREF(fast);
    return ok;
}

// ---- Encoder: split, chunk cache, merges for the misses -------------------------------------------

struct EncoderObject {
    PyObject_HEAD
    MergeTable *table;
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

// The merge table of rank i merging (lefts[i], rights[i]) into results[i]; pairs and made get the merges.
MergeTable *read_merges(PyObject *lefts, PyObject *rights, PyObject *results,
                        std::vector<std::pair<uint32_t, uint32_t>> &pairs, std::vector<uint32_t> &made) {
    std::vector<uint32_t> a, b;
    if (!read_ids(lefts, "lefts must be a sequence of IDs", a) ||
        !read_ids(rights, "rights must be a sequence of IDs", b) ||
        !read_ids(results, "results must be a sequence of IDs", made))
        return nullptr;
    if (a.size() != b.size() || a.size() != made.size()) {
        PyErr_SetString(PyExc_ValueError, "lefts, rights and results must have one entry per merge");
        return nullptr;
    }
    MergeTable *table = nullptr;
    with_gil("Encoder", [&] {
        pairs.resize(a.size());
        for (size_t i = 0; i < a.size(); i++) pairs[i] = {a[i], b[i]};
        std::unique_ptr<MergeTable> built(new MergeTable());
        built->build(pairs, made);
        table = built.release();
    });
    return table;
}

// The base IDs: a dict character -> ID (char kind) or the 256 IDs of the bytes (byte kind).
bool read_base(EncoderCore &core, PyObject *base) {
    if (!PyDict_Check(base)) {
        std::vector<uint32_t> ids;
        if (!read_ids(base, "the byte IDs must be a sequence of 256 IDs", ids)) return false;
        if (ids.size() != 256) {
            PyErr_SetString(PyExc_ValueError, "the byte IDs must be a sequence of 256 IDs");
            return false;
        }
        core.bytes_unit = true;
        std::copy(ids.begin(), ids.end(), core.byte_ids);
        return true;
    }
    core.bytes_unit = false;
    if (!with_gil("Encoder", [&] { core.chars = new std::unordered_map<uint32_t, uint32_t>(); })) return false;
    PyObject *character, *id;
    Py_ssize_t at = 0;
    while (PyDict_Next(base, &at, &character, &id)) {
        const unsigned long value = PyLong_AsUnsignedLong(id);
        if (!PyUnicode_Check(character) || PyUnicode_GET_LENGTH(character) != 1 || PyErr_Occurred() ||
            value >= UINT32_MAX) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "the alphabet maps characters to IDs");
            return false;
        }
        const uint32_t c = PyUnicode_READ_CHAR(character, 0);
        if (!with_gil("Encoder", [&] { (*core.chars)[c] = static_cast<uint32_t>(value); })) return false;
    }
    return true;
}

int Encoder_init(EncoderObject *self, PyObject *args, PyObject *) {
    PyObject *lefts, *rights, *results, *base;
    int mode;
    unsigned int unknown;
    if (!PyArg_ParseTuple(args, "OOOiOI", &lefts, &rights, &results, &mode, &base, &unknown)) return -1;
    if (!check_mode(mode)) return -1;
    if (self->core.lock || self->table || self->core.chars) {  // another thread may be encoding with it
        PyErr_SetString(PyExc_RuntimeError, "Encoder is initialised once");
        return -1;
    }
    if (!read_base(self->core, base)) return -1;
    std::vector<std::pair<uint32_t, uint32_t>> pairs;
    std::vector<uint32_t> made;
    self->table = read_merges(lefts, rights, results, pairs, made);
    if (!self->table) return -1;
    if (!with_gil("Encoder", [&] {
            self->core.cache = new ChunkCache();
            self->ints = new std::vector<PyObject *>();
            self->core.lock = new std::shared_mutex();
        }))
        return -1;
    self->core.table = self->table;
    self->core.mode = mode;
    self->core.unknown = unknown;
    return without_gil("Encoder", [&] { seed_cache(&self->core, pairs, made); }) ? 0 : -1;
}

void Encoder_dealloc(EncoderObject *self) {
    delete self->table;
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

// Encode views (of texts, held by the caller) with `threads` threads into out; false with a Python error set
// if it failed: text(i) is the i-th text, for the byte kind's refusal of a lone surrogate.
template <typename Text>
bool encode_views(EncoderObject *self, const std::vector<TextView> &views, size_t threads, const char *method,
                  Encoded &out, Text &&text) {
    if (!without_gil(method, [&] { encode_all(&self->core, views, threads, out); })) return false;
    if (out.out_of_memory) PyErr_NoMemory();
    else if (out.failed >= 0) surrogate_error(text(static_cast<size_t>(out.failed)), out.surrogate_at);
    return !out.out_of_memory && out.failed < 0;
}

// Encode a sequence of str with `threads` threads into out; false with a Python error set if it failed.
bool encode_batch(EncoderObject *self, PyObject *texts, Py_ssize_t threads, const char *method, Encoded &out) {
    if (!check_encoder(self)) return false;
    if (threads < 1) {
        PyErr_Format(PyExc_ValueError, "%s: threads must be at least 1, got %zd", method, threads);
        return false;
    }
    HeldTexts held;
    return held.hold(texts, method) &&
           encode_views(self, held.views, static_cast<size_t>(threads), method, out, [&](size_t i) { return held[i]; });
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
    const auto room = [](size_t count, size_t size) { return static_cast<Py_ssize_t>(count * size); };
    PyObject *packed = PyBytes_FromStringAndSize(nullptr, room(out.id_count(), sizeof(uint32_t)));
    PyObject *starts = PyBytes_FromStringAndSize(nullptr, room(out.text_count() + 1, sizeof(int64_t)));
    PyObject *result = nullptr;
    if (packed && starts &&
        without_gil("encode_flat", [&] {
            out.copy_ids(reinterpret_cast<uint32_t *>(PyBytes_AS_STRING(packed)), static_cast<size_t>(threads));
            out.copy_offsets(reinterpret_cast<int64_t *>(PyBytes_AS_STRING(starts)));
        }))
        result = PyTuple_Pack(2, packed, starts);
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
    uint32_t top = 0;
    for (const Piece &piece : out.pieces)
        if (!piece.ids.empty()) top = std::max(top, *std::max_element(piece.ids.begin(), piece.ids.end()));
    bool made = false;
    if (!with_gil("encode_lists", [&] { made = cache_ints(self, top); }) || !made) return nullptr;
    PyObject *const *ints = self->ints->data();
    PyObject *lists = PyList_New(static_cast<Py_ssize_t>(out.text_count()));
    Py_ssize_t t = 0;
    out.each_text([&](const uint32_t *ids, size_t length) {
        PyObject *list = lists ? PyList_New(static_cast<Py_ssize_t>(length)) : nullptr;
        if (!list) {
            Py_CLEAR(lists);
            return;
        }
        for (size_t i = 0; i < length; i++) {
            PyObject *value = ints[ids[i]];
            Py_INCREF(value);
            PyList_SET_ITEM(list, static_cast<Py_ssize_t>(i), value);
        }
        PyList_SET_ITEM(lists, t++, list);
    });
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
    std::vector<TextView> views;
    if (!with_gil("encode", [&] { views.push_back(view_of(text)); }) ||
        !encode_views(self, views, 1, "encode", out, [&](size_t) { return text; }))
        return nullptr;
    return packed_ids(out.pieces[0].ids);
}

PyObject *Encoder_get_max_bytes(EncoderObject *self, void *) {
    if (!check_encoder(self)) return nullptr;
    return PyLong_FromSize_t(self->core.cache->max_bytes());
}

int Encoder_set_max_bytes(EncoderObject *self, PyObject *value, void *) {
    if (!check_encoder(self)) return -1;
    if (!value) {
        PyErr_SetString(PyExc_AttributeError, "max_bytes cannot be deleted");
        return -1;
    }
    const size_t bound = PyLong_AsSize_t(value);
    if (bound == static_cast<size_t>(-1) && PyErr_Occurred()) return -1;
    EncoderCore &core = self->core;
    return without_gil("max_bytes", [&] {
        std::unique_lock<std::shared_mutex> hold(*core.lock);
        core.cache->bound(bound);
    }) ? 0 : -1;
}

PyObject *Encoder_get_nbytes(EncoderObject *self, void *) {
    if (!check_encoder(self)) return nullptr;
    return PyLong_FromSize_t(self->core.cache->nbytes());
}

Py_ssize_t Encoder_len(EncoderObject *self) {
    if (!check_encoder(self)) return -1;
    return static_cast<Py_ssize_t>(self->core.cache->count());
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

// ---- ChunkCounter: distinct chunks and their counts, split and counted by threads ------------------

struct ChunkCounterObject {
    PyObject_HEAD
    int mode;
    bool busy;
    std::vector<CountTable> *tables;  // one per thread
};

PyTypeObject ChunkCounterType = {PyVarObject_HEAD_INIT(nullptr, 0)};

int ChunkCounter_init(ChunkCounterObject *self, PyObject *args, PyObject *) {
    int mode, threads;
    if (!PyArg_ParseTuple(args, "ii", &mode, &threads)) return -1;
    if (!check_mode(mode)) return -1;
    if (threads < 1 || threads > 1024) {
        PyErr_Format(PyExc_ValueError, "threads must be 1 to 1024, got %d", threads);
        return -1;
    }
    if (self->tables) {
        PyErr_SetString(PyExc_RuntimeError, "ChunkCounter is initialised once");
        return -1;
    }
    if (!with_gil("ChunkCounter", [&] { self->tables = new std::vector<CountTable>(static_cast<size_t>(threads)); }))
        return -1;
    self->mode = mode;
    return 0;
}

void ChunkCounter_dealloc(ChunkCounterObject *self) {
    delete self->tables;
    Py_TYPE(self)->tp_free(reinterpret_cast<PyObject *>(self));
}

bool check_counter(ChunkCounterObject *self) {
    if (!self->tables) PyErr_SetString(PyExc_ValueError, "ChunkCounter was not initialised");
    return self->tables != nullptr;
}

// Runs work on the counter without the GIL, refusing a second call meanwhile; false with a Python error.
template <typename Work>
bool counter_work(ChunkCounterObject *self, const char *what, Work &&work) {
    if (!check_counter(self) || !claim(self->busy, "ChunkCounter")) return false;
    const bool done = without_gil(what, work);
    self->busy = false;
    return done;
}

// Adds every other thread's table to the first one.
void absorb_tables(std::vector<CountTable> &tables) {
    for (size_t t = 1; t < tables.size(); t++) tables[0].absorb(tables[t]);
}

// add(texts): count the chunks of a sequence of str, without the GIL, the texts sliced among the threads.
PyObject *ChunkCounter_add(ChunkCounterObject *self, PyObject *texts) {
    if (!check_counter(self)) return nullptr;
    HeldTexts held;
    if (!held.hold(texts, "add")) return nullptr;
    if (!counter_work(self, "add", [&] { count_texts(held.views, self->mode, *self->tables); })) return nullptr;
    Py_RETURN_NONE;
}

// pop_counts() -> dict[str, int]: every chunk counted so far (the counter starts over).
PyObject *ChunkCounter_pop_counts(ChunkCounterObject *self, PyObject *) {
    if (!counter_work(self, "pop_counts", [&] { absorb_tables(*self->tables); })) return nullptr;
    CountTable &table = (*self->tables)[0];
    PyObject *counts = PyDict_New();
    if (!counts) return nullptr;
    bool failed = false;
    table.each([&](const char *key, size_t length, int64_t count) {
        if (failed) return;
        PyObject *chunk = PyUnicode_DecodeUTF8(key, static_cast<Py_ssize_t>(length), "surrogatepass");
        PyObject *times = chunk ? PyLong_FromLongLong(count) : nullptr;
        failed = !times || PyDict_SetItem(counts, chunk, times) < 0;
        Py_XDECREF(chunk);
        Py_XDECREF(times);
    });
    table = CountTable();
    if (failed) Py_CLEAR(counts);
    return counts;
}

// pop_byte_layout() -> (symbols, counts) | None: the byte kind's layout of _train_pairs (int32 bytes) of
// the chunks counted so far, and their counts (int64 bytes), the counter starting over; None, the
// counts kept, if a chunk holds a lone surrogate (which UTF-8 cannot hold).
PyObject *ChunkCounter_pop_byte_layout(ChunkCounterObject *self, PyObject *) {
    std::vector<CountTable> &tables = *self->tables;
    ByteLayoutSize size;
    if (!counter_work(self, "pop_byte_layout", [&] {
            absorb_tables(tables);
            size = byte_layout_size(tables[0]);
        }))
        return nullptr;
    if (size.surrogate) Py_RETURN_NONE;
    PyObject *symbols = PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(size.symbols * sizeof(int32_t)));
    PyObject *counts = symbols ? PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(size.chunks * sizeof(int64_t)))
                               : nullptr;
    PyObject *result = counts ? PyTuple_Pack(2, symbols, counts) : nullptr;
    if (result) {
        fill_byte_layout(tables[0], reinterpret_cast<int32_t *>(PyBytes_AS_STRING(symbols)),
                         reinterpret_cast<int64_t *>(PyBytes_AS_STRING(counts)));
        tables[0] = CountTable();
    }
    Py_XDECREF(symbols);
    Py_XDECREF(counts);
    return result;
}

// serialize() -> bytes: the counts so far in CountTable's serialised form (the counter keeps them).
PyObject *ChunkCounter_serialize(ChunkCounterObject *self, PyObject *) {
    size_t size = 0;
    if (!counter_work(self, "serialize", [&] {
            absorb_tables(*self->tables);
            size = (*self->tables)[0].serialized_size();
        }))
        return nullptr;
    PyObject *data = PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(size));
    if (data) (*self->tables)[0].serialize(self->mode, PyBytes_AS_STRING(data));
    return data;
}

// add_serialized(data): adds counts that serialize() wrote (of the same split mode); ValueError, nothing
// added, for anything else.
PyObject *ChunkCounter_add_serialized(ChunkCounterObject *self, PyObject *args) {
    Py_buffer data;
    if (!check_counter(self) || !PyArg_ParseTuple(args, "y*", &data)) return nullptr;
    const bool done = counter_work(self, "add_serialized", [&] {
        (*self->tables)[0].add_serialized(self->mode, static_cast<const char *>(data.buf), static_cast<size_t>(data.len));
    });
    PyBuffer_Release(&data);
    if (!done) return nullptr;
    Py_RETURN_NONE;
}

// absorb(other): adds the counts of another ChunkCounter of the same split mode, which starts over.
PyObject *ChunkCounter_absorb(ChunkCounterObject *self, PyObject *other) {
    if (!check_counter(self)) return nullptr;
    if (!PyObject_TypeCheck(other, &ChunkCounterType))
        return PyErr_Format(PyExc_TypeError, "absorb takes a ChunkCounter, got %.100s", Py_TYPE(other)->tp_name);
    ChunkCounterObject *source = reinterpret_cast<ChunkCounterObject *>(other);
    if (source == self) return PyErr_Format(PyExc_ValueError, "a ChunkCounter cannot absorb itself");
    if (!check_counter(source) || !claim(source->busy, "ChunkCounter")) return nullptr;
    if (source->mode != self->mode) {
        source->busy = false;
        return PyErr_Format(PyExc_ValueError, "absorb: the counts are of another split mode");
    }
    const bool done = counter_work(self, "absorb", [&] {
        absorb_tables(*self->tables);
        absorb_tables(*source->tables);
        (*self->tables)[0].absorb((*source->tables)[0]);
    });
    source->busy = false;
    if (!done) return nullptr;
    Py_RETURN_NONE;
}

// len(counter): the distinct chunks counted so far.
Py_ssize_t ChunkCounter_len(ChunkCounterObject *self) {
    if (!counter_work(self, "len", [&] { absorb_tables(*self->tables); })) return -1;
    return static_cast<Py_ssize_t>((*self->tables)[0].size());
}

// task_summary() -> str: "1,234 entries", the distinct chunks, for a partition task's log line (stage_log).
PyObject *ChunkCounter_task_summary(ChunkCounterObject *self, PyObject *) {
    const Py_ssize_t size = ChunkCounter_len(self);
    if (size < 0) return nullptr;
    PyObject *count = PyLong_FromSsize_t(size);
    PyObject *spec = count ? PyUnicode_FromString(",") : nullptr;
    PyObject *grouped = spec ? PyObject_Format(count, spec) : nullptr;
    PyObject *summary = grouped ? PyUnicode_FromFormat("%U entries", grouped) : nullptr;
    Py_XDECREF(count);
    Py_XDECREF(spec);
    Py_XDECREF(grouped);
    return summary;
}

// Pickled as its serialised form: ChunkCounter(mode, threads), then __setstate__(serialize()).
PyObject *ChunkCounter_reduce(ChunkCounterObject *self, PyObject *) {
    PyObject *data = ChunkCounter_serialize(self, nullptr);
    if (!data) return nullptr;
    return Py_BuildValue("O(in)N", reinterpret_cast<PyObject *>(Py_TYPE(self)), self->mode,
                         static_cast<Py_ssize_t>(self->tables->size()), data);
}

PyMethodDef ChunkCounter_methods[] = {
    {"add", reinterpret_cast<PyCFunction>(ChunkCounter_add), METH_O,
     "add(texts): count the chunks of each str of the sequence (threads share the texts)."},
    {"pop_counts", reinterpret_cast<PyCFunction>(ChunkCounter_pop_counts), METH_NOARGS,
     "pop_counts() -> dict[str, int]: the counts so far; the counter starts over."},
    {"pop_byte_layout", reinterpret_cast<PyCFunction>(ChunkCounter_pop_byte_layout), METH_NOARGS,
     "pop_byte_layout() -> (symbols, counts) | None: the byte kind's training layout of the counts so far "
     "(the counter starts over), or None, the counts kept, if a chunk holds a lone surrogate."},
    {"serialize", reinterpret_cast<PyCFunction>(ChunkCounter_serialize), METH_NOARGS,
     "serialize() -> bytes: the counts so far as one buffer (lengths, UTF-8 keys, counts); the counter keeps them."},
    {"add_serialized", reinterpret_cast<PyCFunction>(ChunkCounter_add_serialized), METH_VARARGS,
     "add_serialized(data): add counts serialize() wrote, of the same split mode."},
    {"absorb", reinterpret_cast<PyCFunction>(ChunkCounter_absorb), METH_O,
     "absorb(other): add another ChunkCounter's counts (of the same split mode); the other starts over."},
    {"task_summary", reinterpret_cast<PyCFunction>(ChunkCounter_task_summary), METH_NOARGS,
     "task_summary() -> str: how many distinct chunks, for a partition task's log line."},
    {"__reduce__", reinterpret_cast<PyCFunction>(ChunkCounter_reduce), METH_NOARGS,
     "Pickled as its serialised form."},
    {"__setstate__", reinterpret_cast<PyCFunction>(ChunkCounter_add_serialized), METH_VARARGS,
     "__setstate__(data): add_serialized(data), for unpickling."},
    {nullptr, nullptr, 0, nullptr},
};

PySequenceMethods ChunkCounter_sequence = {reinterpret_cast<lenfunc>(ChunkCounter_len)};

// ---- PairMerger: the merge loop ------------------------------------------------------------------

struct PairMergerObject {
    PyObject_HEAD
    bool busy;
    PairMerger *merger;
};

// Builds the merger from the layout without the GIL; the buffers stay the caller's, and may change
// meanwhile: PairMerger reads each value once and checks it as it reads it.
int PairMerger_init(PairMergerObject *self, PyObject *args, PyObject *) {
    Py_buffer symbols, counts;
    unsigned int first_id;
    long long min_frequency, forbidden;
    if (!PyArg_ParseTuple(args, "y*y*ILL", &symbols, &counts, &first_id, &min_frequency, &forbidden)) return -1;
    int status = -1;
    if (self->merger) {
        PyErr_SetString(PyExc_RuntimeError, "PairMerger is initialised once");
    } else if (symbols.len % sizeof(int32_t) || counts.len % sizeof(int64_t)) {
        PyErr_SetString(PyExc_ValueError, "PairMerger takes int32 symbols and int64 counts");
    } else if (min_frequency < 1 || first_id > 0x10FFFF) {
        PyErr_SetString(PyExc_ValueError, "PairMerger: min_frequency must be >= 1 and first_id a possible ID");
    } else if (claim(self->busy, "PairMerger")) {  // another thread may be initialising it without the GIL
        PairMerger *merger = nullptr;
        const bool built = without_gil("PairMerger", [&] {
            merger = new PairMerger(static_cast<const int32_t *>(symbols.buf), symbols.len / sizeof(int32_t),
                                    static_cast<const int64_t *>(counts.buf), counts.len / sizeof(int64_t), first_id,
                                    min_frequency, forbidden);
        });
        self->busy = false;
        if (built) {
            self->merger = merger;
            status = 0;
        }
    }
    PyBuffer_Release(&symbols);
    PyBuffer_Release(&counts);
    return status;
}

void PairMerger_dealloc(PairMergerObject *self) {
    delete self->merger;
    Py_TYPE(self)->tp_free(reinterpret_cast<PyObject *>(self));
}

// merge(limit) -> list[tuple[int, int]]: up to limit more merges, fewer once no pair may be merged.
PyObject *PairMerger_merge(PairMergerObject *self, PyObject *arg) {
    if (!self->merger) {
        PyErr_SetString(PyExc_ValueError, "PairMerger was not initialised");
        return nullptr;
    }
    const size_t limit = PyLong_AsSize_t(arg);
    if (limit == static_cast<size_t>(-1) && PyErr_Occurred()) return nullptr;
    if (!claim(self->busy, "PairMerger")) return nullptr;
    std::vector<PairMerger::Merge> merges;
    const bool merged = without_gil("PairMerger", [&] { self->merger->merge(limit, merges); });
    self->busy = false;
    if (!merged) return nullptr;
    PyObject *result = PyList_New(static_cast<Py_ssize_t>(merges.size()));
    if (!result) return nullptr;
    for (size_t i = 0; i < merges.size(); i++) {
        PyObject *pair = Py_BuildValue("(II)", merges[i].first, merges[i].second);
        if (!pair) {
            Py_DECREF(result);
            return nullptr;
        }
        PyList_SET_ITEM(result, static_cast<Py_ssize_t>(i), pair);
    }
    return result;
}

PyMethodDef PairMerger_methods[] = {
    {"merge", reinterpret_cast<PyCFunction>(PairMerger_merge), METH_O,
     "merge(limit) -> list[tuple[int, int]]: up to limit more merges (left, right IDs), fewer once none is left."},
    {nullptr, nullptr, 0, nullptr},
};

PyTypeObject PairMergerType = {PyVarObject_HEAD_INIT(nullptr, 0)};

// ---- module functions ----------------------------------------------------------------------------

// split(mode, text) -> list[str]: the chunks of text under a split mode.
PyObject *native_split(PyObject *, PyObject *args) {
    int mode;
    PyObject *text;
    if (!PyArg_ParseTuple(args, "iU", &mode, &text)) return nullptr;
    if (!check_mode(mode)) return nullptr;
    std::vector<size_t> ends;
    if (!with_gil("split", [&] {
            Splitter splitter;
            view_of(text).split(mode, splitter, ends);
        }))
        return nullptr;
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

// ---- a byte-level tokenizer.json's vocab and merges as JSON text -----------------------------------------

// Views of a sequence of bytes objects, which `held` keeps alive (the caller releases it).
bool bytes_views(PyObject *sequence, const char *what, PyObject *&held, std::vector<std::string_view> &out) {
    held = PySequence_Fast(sequence, what);
    if (!held) return false;
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(held);
    if (!with_gil(what, [&] { out.reserve(static_cast<size_t>(n)); })) return false;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(held, i);
        if (!PyBytes_Check(item)) {
            PyErr_Format(PyExc_TypeError, "%s: item %zd is %.100s, not bytes", what, i, Py_TYPE(item)->tp_name);
            return false;
        }
        out.emplace_back(PyBytes_AS_STRING(item), static_cast<size_t>(PyBytes_GET_SIZE(item)));
    }
    return true;
}

// One spelling of each byte: a sequence of 256 bytes objects.
bool read_byte_table(PyObject *sequence, std::string (&table)[256]) {
    const char *what = "a spelling is 256 bytes objects";
    PyObject *held = nullptr;
    std::vector<std::string_view> views;
    bool ok = bytes_views(sequence, what, held, views);
    if (ok && views.size() != 256) {
        PyErr_SetString(PyExc_ValueError, what);
        ok = false;
    }
    ok = ok && with_gil(what, [&] {
        for (size_t b = 0; b < 256; b++) table[b].assign(views[b]);
    });
    Py_XDECREF(held);
    return ok;
}

bool read_spelling(PyObject *plain, PyObject *escaped, ByteSpelling &spelling) {
    return read_byte_table(plain, spelling.plain) && read_byte_table(escaped, spelling.escaped);
}

// The UTF-8 of a str argument.
bool read_utf8(PyObject *text, std::string &out) {
    Py_ssize_t size;
    const char *data = PyUnicode_AsUTF8AndSize(text, &size);
    if (!data) return false;
    return with_gil("text", [&] { out.assign(data, static_cast<size_t>(size)); });
}

PyObject *str_of(const std::string &text) {
    return PyUnicode_DecodeUTF8(text.data(), static_cast<Py_ssize_t>(text.size()), "strict");
}

// vocab_json(tokens, regular, plain, escaped, newline, step) -> str
PyObject *native_vocab_json(PyObject *, PyObject *args) {
    PyObject *tokens_arg, *regular_arg, *plain, *escaped, *newline_arg, *step_arg;
    if (!PyArg_ParseTuple(args, "OOOOUU", &tokens_arg, &regular_arg, &plain, &escaped, &newline_arg, &step_arg))
        return nullptr;
    PyObject *held = nullptr;
    std::vector<std::string_view> tokens;
    std::vector<uint32_t> regular;
    ByteSpelling spelling;
    std::string newline, step, text;
    const bool ok = bytes_views(tokens_arg, "tokens are bytes objects", held, tokens) &&
                    read_ids(regular_arg, "regular IDs", regular) && read_spelling(plain, escaped, spelling) &&
                    read_utf8(newline_arg, newline) && read_utf8(step_arg, step) &&
                    with_gil("vocab_json", [&] { text = vocab_json(tokens, regular, spelling, newline, step); });
    Py_XDECREF(held);
    return ok ? str_of(text) : nullptr;
}

// merges_json(tokens, regular, lefts, rights, plain, escaped, newline, step) -> str
PyObject *native_merges_json(PyObject *, PyObject *args) {
    PyObject *tokens_arg, *regular_arg, *lefts_arg, *rights_arg, *plain, *escaped, *newline_arg, *step_arg;
    if (!PyArg_ParseTuple(args, "OOOOOOUU", &tokens_arg, &regular_arg, &lefts_arg, &rights_arg, &plain, &escaped,
                          &newline_arg, &step_arg))
        return nullptr;
    PyObject *held = nullptr;
    std::vector<std::string_view> tokens;
    std::vector<uint32_t> regular, lefts, rights;
    ByteSpelling spelling;
    std::string newline, step, text;
    const bool ok = bytes_views(tokens_arg, "tokens are bytes objects", held, tokens) &&
                    read_ids(regular_arg, "regular IDs", regular) && read_ids(lefts_arg, "left IDs", lefts) &&
                    read_ids(rights_arg, "right IDs", rights) && read_spelling(plain, escaped, spelling) &&
                    read_utf8(newline_arg, newline) && read_utf8(step_arg, step) &&
                    with_gil("merges_json", [&] {
                        text = merges_json(tokens, regular, lefts, rights, spelling, newline, step);
                    });
    Py_XDECREF(held);
    return ok ? str_of(text) : nullptr;
}

// _fail_next(point, after=0): the named point of _native_fault.h throws std::bad_alloc once, when it is
// reached after `after` passes (for the tests of the failure paths).
PyObject *native_fail_next(PyObject *, PyObject *args) {
    const char *name;
    int after = 0;
    if (!PyArg_ParseTuple(args, "s|i", &name, &after)) return nullptr;
    if (std::strcmp(name, "thread_start") == 0) arm_fault(THREAD_START, after);
    else if (std::strcmp(name, "without_gil") == 0) arm_fault(WITHOUT_GIL, after);
    else return PyErr_Format(PyExc_ValueError, "_fail_next takes 'thread_start' or 'without_gil', got '%s'", name);
    Py_RETURN_NONE;
}

PyMethodDef module_methods[] = {
    {"split", native_split, METH_VARARGS,
     "split(mode, text) -> list[str]: the chunks of text under a split mode (a value of SPLIT_MODES)."},
    {"vocab_json", native_vocab_json, METH_VARARGS,
     "vocab_json(tokens, regular, plain, escaped, newline, step) -> str: a byte-level tokenizer.json's vocab as "
     "JSON text, {name: ID} sorted by name, each name the bytes of tokens[ID] spelled by plain (to sort) and escaped "
     "(to write), two sequences of 256 bytes; items at newline + step, the closing brace at newline."},
    {"merges_json", native_merges_json, METH_VARARGS,
     "merges_json(tokens, regular, lefts, rights, plain, escaped, newline, step) -> str: the merges [[left, "
     "right], ...] as JSON text, named and indented as vocab_json names and indents; ValueError for an ID that is "
     "not in regular."},
    {"_fail_next", native_fail_next, METH_VARARGS,
     "_fail_next(point, after=0): 'thread_start' or 'without_gil' fails once after `after` passes, as if out of "
     "memory (for tests)."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef native_module = {PyModuleDef_HEAD_INIT, "_native", "The native core of lmprep's tokenizer.", -1,
                             module_methods};

// SPLIT_MODES: pattern name -> split mode, from the one definition in _native_split.h.
bool add_split_modes(PyObject *module) {
    PyObject *modes = PyDict_New();
    if (!modes) return false;
    for (const ModeName &entry : MODE_NAMES) {
        PyObject *value = PyLong_FromLong(entry.mode);
        const bool added = value && PyDict_SetItemString(modes, entry.name, value) == 0;
        Py_XDECREF(value);
        if (!added) {
            Py_DECREF(modes);
            return false;
        }
    }
    const bool added = PyModule_AddObjectRef(module, "SPLIT_MODES", modes) == 0;
    Py_DECREF(modes);
    return added;
}

bool ready_type(PyObject *module, PyTypeObject &type, const char *name, size_t size, const char *doc,
                initproc init, destructor dealloc, PyMethodDef *methods) {
    type.tp_name = name;
    type.tp_basicsize = static_cast<Py_ssize_t>(size);
    type.tp_flags = Py_TPFLAGS_DEFAULT;
    type.tp_doc = doc;
    type.tp_new = PyType_GenericNew;
    type.tp_init = init;
    type.tp_dealloc = dealloc;
    type.tp_methods = methods;
    return PyType_Ready(&type) == 0 &&
           PyModule_AddObjectRef(module, std::strrchr(name, '.') + 1, reinterpret_cast<PyObject *>(&type)) == 0;
}

bool add_types(PyObject *module) {
    EncoderType.tp_getset = Encoder_getset;
    EncoderType.tp_as_sequence = &Encoder_sequence;
    ChunkCounterType.tp_as_sequence = &ChunkCounter_sequence;
    return ready_type(module, EncoderType, "pipeline.tokenizer._native.Encoder", sizeof(EncoderObject),
                      "Encoder(lefts, rights, results, mode, base, unknown): split, cache and merge in one pass; "
                      "merge i makes results[i] of (lefts[i], rights[i]); base is the 256 IDs of the bytes (byte "
                      "kind) or a dict character -> ID (char kind).",
                      reinterpret_cast<initproc>(Encoder_init), reinterpret_cast<destructor>(Encoder_dealloc),
                      Encoder_methods) &&
           ready_type(module, ChunkCounterType, "pipeline.tokenizer._native.ChunkCounter", sizeof(ChunkCounterObject),
                      "ChunkCounter(mode, threads): the distinct chunks of texts under a split mode and their counts.",
                      reinterpret_cast<initproc>(ChunkCounter_init), reinterpret_cast<destructor>(ChunkCounter_dealloc),
                      ChunkCounter_methods) &&
           ready_type(module, PairMergerType, "pipeline.tokenizer._native.PairMerger", sizeof(PairMergerObject),
                      "PairMerger(symbols, counts, first_id, min_frequency, forbidden): BPE training's merge loop "
                      "over the layout of _train_pairs (int32 symbols, int64 counts; forbidden: an ID no merge may "
                      "hold, or -1).",
                      reinterpret_cast<initproc>(PairMerger_init), reinterpret_cast<destructor>(PairMerger_dealloc),
                      PairMerger_methods);
}

}  // namespace

PyMODINIT_FUNC PyInit__native(void) {
    if (!with_gil("_native", build_class_table)) return nullptr;
    PyObject *module = PyModule_Create(&native_module);
    if (module && (!add_types(module) || !add_split_modes(module))) Py_CLEAR(module);
    return module;
}
